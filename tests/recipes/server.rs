//! The lock server's recipes, each run against a real `distlock serve --tokens` over the
//! scratch store with a real token: the CI step that takes the lock with curl alone
//! (`ci-deploy-server.yml`), the Python client (`distlock_client.py`), and the server's systemd
//! unit (`distlock-serve.service`), started from its ExecStart over HTTPS with a CA the test
//! makes. The server serves beside the commands that use the same SQLite file, so the tests
//! look at the locks and their history with `distlock status` and `distlock log`.
//!
//! [`Scratch::through_server`] puts such a server in front of a scratch store for the recipes
//! that run through one: the CI step with distlock on the runner
//! (`ci-deploy-through-server.yml`), and the shared-store recipes of `recipes.rs` in their
//! second run.
//!
//! The lease rule (the book's "The lease rule, for every client") is tried on every client of a
//! server at once (`lease_rule_*`): each holds a short lease while its job sits in a critical
//! section ([`critical`]), over SQLite and over PostgreSQL ([`Scratch::postgres`]), and the
//! server goes away (SIGSTOP; SIGKILL, then a start on the same port), breaks the lock, or
//! forgets the token. The other ways a user could get two holders from the Python client and
//! the curl step (one owner twice, signals, a release answered 503 or 404) are in
//! `one_holder.rs`.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use serde_json::{Value, json};

use crate::certs::{Ca, CertFiles};
use crate::critical;
use crate::process::{BIN, Finished, Proc, wait_for_file, wait_until};
use crate::{
    SYSTEMD_PATH, Scratch, Unit, example, fence_of, read, read_or_empty, replace_each, root,
    turn_job, turns_taken, verify_unit,
};

/// How long a server may take to say where it listens.
const STARTUP: Duration = Duration::from_secs(20);

/// The longest any one request of these tests may take (a waiting request is answered within
/// 30 s).
const REQUEST: Duration = Duration::from_secs(60);

/// A secret of the right shape that no tokens file knows.
const UNKNOWN_SECRET: &str = "dl_0000000000000000000000000000000000000000000000000000000000000000";

// ---------------------------------------------------------------------------------------------
// A server under test, and its tokens

/// A running `distlock serve`; dropped, it gets SIGTERM (and SIGKILL if it lingers).
struct Served {
    proc: Option<Proc>,
    /// `http://127.0.0.1:PORT`, or `https://…`.
    url: String,
    /// Over HTTPS, the CA's certificate (PEM) that its clients trust.
    ca_cert: Option<PathBuf>,
    stderr: PathBuf,
    agent: ureq::Agent,
}

impl Served {
    /// Starts `cmd`, a `distlock … serve` command, and waits for its first stderr line,
    /// `distlock: listening on SCHEME://HOST:PORT`. Clients reach it on 127.0.0.1:PORT, over
    /// HTTPS trusting `ca` only (its certificate in `serve-N.ca.pem`).
    fn start(s: &Scratch, cmd: &mut Command, ca: Option<&Ca>) -> Served {
        let name = format!("serve-{}", s.names.fetch_add(1, Ordering::Relaxed));
        let ca_cert = ca.map(|ca| {
            let path = s.path(&format!("{name}.ca.pem"));
            std::fs::write(&path, ca.pem()).expect("write the CA's certificate");
            path
        });
        let proc = Proc::spawn(cmd, s.dir.path(), &name);
        let stderr = s.path(&format!("{name}.stderr"));
        let mut first = String::new();
        wait_until(STARTUP, "distlock serve says where it listens", || {
            let text = read_or_empty(&stderr);
            text.split_once('\n')
                .map(|(line, _)| first = line.to_owned())
                .is_some()
        });
        let scheme = if ca.is_some() { "https" } else { "http" };
        let listening = format!("distlock: listening on {scheme}://");
        let port = first
            .strip_prefix(&listening)
            .and_then(|addr| addr.parse::<SocketAddr>().ok())
            .map(|addr| addr.port())
            .filter(|&port| port != 0)
            .unwrap_or_else(|| {
                panic!("the first stderr line must be `{listening}HOST:PORT`: {first:?}")
            });
        Served {
            proc: Some(proc),
            url: format!("{scheme}://127.0.0.1:{port}"),
            ca_cert,
            stderr,
            agent: agent(ca),
        }
    }

    /// Sets the CA that a client of this server trusts, under `name` (`DISTLOCK_CA_CERT`,
    /// `CURL_CA_BUNDLE`), when it serves HTTPS.
    fn trusted<'c>(&self, cmd: &'c mut Command, name: &str) -> &'c mut Command {
        match &self.ca_cert {
            Some(ca_cert) => cmd.env(name, ca_cert),
            None => cmd.env_remove(name),
        }
    }

    fn pid(&self) -> nix::unistd::Pid {
        self.proc.as_ref().expect("a running server").pid()
    }

    fn stderr(&self) -> String {
        read_or_empty(&self.stderr)
    }

    /// `GET PATH` with `token` as its bearer: the status and the body.
    fn get(&self, path: &str, token: &str) -> (u16, String) {
        let url = format!("{}{path}", self.url);
        let sent = self
            .agent
            .get(&url)
            .header("authorization", format!("Bearer {token}"))
            .call();
        answer(sent, &format!("GET {url}"))
    }

    /// `POST PATH` of `body` as JSON, with `token` as its bearer: the status and the body.
    fn post(&self, path: &str, token: &str, body: &Value) -> (u16, String) {
        let url = format!("{}{path}", self.url);
        let sent = self
            .agent
            .post(&url)
            .header("authorization", format!("Bearer {token}"))
            .content_type("application/json")
            .send(body.to_string());
        answer(sent, &format!("POST {url} {body}"))
    }

    /// How many requests wait in a queue now (`distlock_waiting_requests` of `/metrics`).
    fn waiting(&self, token: &str) -> u64 {
        let (status, text) = self.get("/metrics", token);
        assert_eq!(status, 200, "GET /metrics: {text}");
        text.lines()
            .find_map(|line| line.strip_prefix("distlock_waiting_requests "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no distlock_waiting_requests in {text}"))
    }

    /// SIGTERM, as `systemctl stop` sends; how the server ended.
    fn stop(mut self) -> Finished {
        let proc = self.proc.take().expect("a running server");
        proc.signal(Signal::SIGTERM);
        proc.finish(Duration::from_secs(10))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(proc) = self.proc.take() {
            let _ = nix::sys::signal::kill(proc.pid(), Signal::SIGTERM);
            proc.finish(Duration::from_secs(5));
        }
    }
}

/// The status and the body of an answer to the request `what`.
fn answer(
    sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    what: &str,
) -> (u16, String) {
    let mut response = sent.unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
    let text = response
        .body_mut()
        .read_to_string()
        .unwrap_or_else(|e| panic!("{what}: reading the body: {e}"));
    (response.status().as_u16(), text)
}

/// An HTTP client that reports every status as an answer; over HTTPS it trusts `ca` only.
fn agent(ca: Option<&Ca>) -> ureq::Agent {
    crate::certs::agent(ca, REQUEST)
}

impl Scratch {
    /// `distlock token add NAME --tokens FILE SCOPE…`: the new token's secret.
    fn token(&self, file: &Path, name: &str, scope: &[&str]) -> String {
        let file = file.to_str().expect("utf-8 path");
        let mut args = vec!["token", "add", name, "--tokens", file];
        args.extend(scope);
        let made = self.json(&args, 0);
        made["secret"]
            .as_str()
            .unwrap_or_else(|| panic!("a secret in {made}"))
            .to_owned()
    }

    /// `distlock serve --listen 127.0.0.1:0 --tokens FILE` over the scratch store.
    fn serve(&self, tokens: &Path) -> Served {
        self.serve_with(tokens, &[])
    }

    /// [`Scratch::serve`], with `args` after the tokens file.
    fn serve_with(&self, tokens: &Path, args: &[&str]) -> Served {
        let mut cmd = self.distlock_cmd();
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--tokens"])
            .arg(tokens)
            .args(args);
        Served::start(self, &mut cmd, None)
    }
}

// ---------------------------------------------------------------------------------------------
// Every command of a recipe through a server

/// The server in front of a scratch store whose commands all go through it
/// ([`Scratch::through_server`]): HTTPS with a certificate of a CA made for the test, and one
/// token.
pub(crate) struct Front {
    served: Served,
    secret: String,
    /// The CA, and the arguments of `serve` after `--listen`: what starting it again takes.
    ca: Ca,
    serve_args: Vec<String>,
}

impl Front {
    /// `https://127.0.0.1:PORT`: what `DISTLOCK_DB` gets.
    pub(crate) fn url(&self) -> &str {
        &self.served.url
    }

    /// The token's secret: what `DISTLOCK_TOKEN` gets.
    pub(crate) fn secret(&self) -> &str {
        &self.secret
    }

    /// The CA's certificate, PEM: what `DISTLOCK_CA_CERT` names.
    pub(crate) fn ca_cert(&self) -> &Path {
        self.served.ca_cert.as_deref().expect("a server over HTTPS")
    }

    /// Fails unless the server's log has a request of the token: the commands went through it.
    pub(crate) fn assert_served(&self) {
        let log = self.served.stderr();
        assert!(
            log.lines().any(|line| line.ends_with(" token recipes")),
            "no request of the token reached the server: {log}"
        );
    }

    /// Fails if any of `outputs`, the stdout and stderr of `what`, shows the secret.
    pub(crate) fn assert_secret_kept(&self, outputs: &[&[u8]], what: &str) {
        for output in outputs {
            assert!(
                !String::from_utf8_lossy(output).contains(&self.secret),
                "{what} printed the token's secret"
            );
        }
    }

    /// Fails if a file in `dir`, or in a folder below it, shows the secret: the stdout and
    /// stderr of every process a test started there, and the server's log.
    pub(crate) fn assert_secret_kept_in(&self, dir: &Path) {
        for entry in std::fs::read_dir(dir).expect("read the scratch folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                self.assert_secret_kept_in(&path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                self.assert_secret_kept(&[&bytes], &path.display().to_string());
            }
        }
    }
}

impl Scratch {
    /// This scratch store behind a `distlock serve --tokens FILE` over HTTPS, with one token of
    /// `scope` (`--prefix deploy-`, `--all-resources --operator`) made by `distlock token add`.
    /// From here on the commands that [`Scratch::cmd`] makes, and the crontab's and the unit's
    /// ([`Scratch::store_env`]), go through the server with `DISTLOCK_DB=https://…`, the token in
    /// `DISTLOCK_TOKEN` and the CA in `DISTLOCK_CA_CERT`; the store stays where it was, for the
    /// tests that look at it.
    pub(crate) fn through_server(mut self, scope: &[&str]) -> Scratch {
        let ca = Ca::new("distlock recipes test CA");
        let files = ca.server_files(self.dir.path(), "server");
        let tokens = self.path("tokens.json");
        let secret = self.token(&tokens, "recipes", scope);
        let mut serve_args = vec![
            "--tokens".to_owned(),
            tokens.to_str().expect("utf-8 path").to_owned(),
        ];
        serve_args.extend(files.args());
        let served = self.serve_at("127.0.0.1:0", &serve_args, &ca);
        self.front = Some(Front {
            served,
            secret,
            ca,
            serve_args,
        });
        self
    }

    /// `distlock serve --listen LISTEN ARGS…` over the store itself, HTTPS with a certificate
    /// of `ca`.
    fn serve_at(&self, listen: &str, args: &[String], ca: &Ca) -> Served {
        let mut cmd = self.distlock_cmd();
        self.own_store_env(&mut cmd)
            .args(["serve", "--listen", listen])
            .args(args);
        Served::start(self, &mut cmd, Some(ca))
    }
}

/// A scratch store with a tokens file holding one token for `deploy/`, named `name`, and a
/// server over both: (scratch, server, the token's secret).
fn served(name: &str) -> (Scratch, Served, String) {
    let s = Scratch::new();
    let tokens = s.path("tokens.json");
    let secret = s.token(&tokens, name, &["--prefix", "deploy/"]);
    let served = s.serve(&tokens);
    (s, served, secret)
}

/// Fails unless neither stdout nor stderr of `done` shows `secret`.
fn assert_secret_kept(done: &Finished, secret: &str) {
    assert!(
        !done.stdout().contains(secret) && !done.stderr().contains(secret),
        "a secret was printed: {}",
        done.describe()
    );
}

/// Fails unless the events of one tenure are `acquired`, then `renewed` `at_least` times or
/// more, then `released`, each naming `token`.
fn assert_one_tenure(log: &[Value], fence: i64, at_least: usize, token: &str) {
    let events: Vec<&Value> = log.iter().filter(|e| fence_of(e) == fence).collect();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().expect("event"))
        .collect();
    assert!(
        names.len() >= 2
            && names[0] == "acquired"
            && names[names.len() - 1] == "released"
            && names[1..names.len() - 1].iter().all(|&e| e == "renewed")
            && names.len() - 2 >= at_least,
        "tenure {fence}: acquired, {at_least}+ renewed, released: {names:?}"
    );
    assert!(
        events.iter().all(|e| e["token"] == token),
        "tenure {fence}: every event names the token {token}: {events:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// A CI step through the server, with curl alone

/// The `run: |` script of the CI workflow `examples/NAME`, as GitHub Actions writes it to a
/// file: the block's lines without its indentation.
fn ci_run_script(name: &str) -> String {
    let text = example(name);
    let indent = |line: &str| line.len() - line.trim_start_matches(' ').len();
    assert_eq!(
        text.lines()
            .filter(|l| l.trim_start().starts_with("run:"))
            .count(),
        1,
        "one run: step in {name}"
    );
    let mut lines = text.lines();
    let key = lines
        .by_ref()
        .find(|line| line.trim_start() == "run: |")
        .unwrap_or_else(|| panic!("{name}: a `run: |` block"));
    let mut block: Vec<&str> = lines
        .take_while(|line| line.trim().is_empty() || indent(line) > indent(key))
        .collect();
    while block.last().is_some_and(|line| line.trim().is_empty()) {
        block.pop();
    }
    let inner = block.first().map_or(0, |line| indent(line));
    block
        .iter()
        .map(|line| format!("{}\n", line.get(inner..).unwrap_or("")))
        .collect()
}

/// The CI step of `ci-deploy-server.yml` as pipeline run `run`: its script with `./deploy.sh`
/// pointed at `deploy` and the `settings` changed, run as GitHub Actions runs a `run:` block
/// (`bash --noprofile --norc -eo pipefail FILE`) with the server's URL and `secret` in
/// `DISTLOCK_URL` and `DISTLOCK_TOKEN` (and over HTTPS the server's CA in `CURL_CA_BUNDLE`,
/// which curl trusts). The runner has no distlock: its `PATH` is the system's,
/// after a `distlock` that only records that it was called (in `distlock-called`). SIGTERM is
/// at its default action, as a runner's job gets it (a test run may have been started ignoring
/// it, which its shells would inherit). Its stdout and stderr are in `step-RUN.stdout` and
/// `step-RUN.stderr`.
fn server_step(
    s: &Scratch,
    served: &Served,
    secret: &str,
    deploy: &Path,
    settings: &[(&str, &str)],
    run: u32,
) -> Proc {
    server_job(
        s,
        served,
        secret,
        deploy,
        settings,
        run,
        &format!("step-{run}"),
    )
}

/// [`server_step`] as one job of pipeline run `run`, its script and its output named `name`
/// (`NAME.sh`, `NAME.stdout`, `NAME.stderr`): the jobs of one run (a matrix's legs, two deploy
/// jobs) differ in their names alone, and here not even in their job's id nor their runner's
/// name. Each is a process group of its own, as a runner's step is, so that a test may signal
/// the whole step.
fn server_job(
    s: &Scratch,
    served: &Served,
    secret: &str,
    deploy: &Path,
    settings: &[(&str, &str)],
    run: u32,
    name: &str,
) -> Proc {
    let yml = example("ci-deploy-server.yml");
    for name in ["DISTLOCK_URL", "DISTLOCK_TOKEN"] {
        assert!(
            yml.contains(&format!("{name}: ${{{{ secrets.{name} }}}}")),
            "the step takes {name} from the secrets"
        );
    }
    let mut pairs = vec![("./deploy.sh", deploy.to_str().expect("utf-8 path"))];
    pairs.extend(settings);
    let script = s.path(&format!("{name}.sh"));
    std::fs::write(
        &script,
        replace_each(&ci_run_script("ci-deploy-server.yml"), &pairs),
    )
    .expect("write the step");
    let runner_bin = s.path("runner-bin");
    if !runner_bin.exists() {
        std::fs::create_dir(&runner_bin).expect("mkdir runner-bin");
        s.script(
            "runner-bin/distlock",
            &format!("echo \"$@\" >>'{}'\nexit 127\n", s.p("distlock-called")),
        );
    }
    let mut cmd = Command::new("env");
    cmd.args(["--default-signal=TERM", "bash"])
        .args(["--noprofile", "--norc", "-eo", "pipefail"])
        .arg(&script)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", runner_bin.display()))
        .env("HOME", s.dir.path())
        .env("DISTLOCK_URL", &served.url)
        .env("DISTLOCK_TOKEN", secret)
        .env("GITHUB_REPOSITORY", "acme/shop")
        .env("GITHUB_RUN_ID", run.to_string())
        .env("GITHUB_RUN_ATTEMPT", "1")
        .env("GITHUB_JOB", "deploy")
        .env("RUNNER_NAME", "GitHub Actions 1")
        .current_dir(s.dir.path())
        .process_group(0);
    served.trusted(&mut cmd, "CURL_CA_BUNDLE");
    Proc::spawn(&mut cmd, s.dir.path(), name)
}

/// The owner the step of pipeline run `run` (see [`server_job`]) holds the lock as: its run,
/// job, runner and shell's pid.
fn step_owner(run: u32, step: &Proc) -> String {
    format!(
        "acme/shop run {run}.1 deploy GitHub Actions 1 {}",
        step.pid()
    )
}

/// Fails if the step ran `distlock`: it must need curl alone.
fn assert_no_distlock_on_the_runner(s: &Scratch) {
    assert!(
        !s.path("distlock-called").exists(),
        "the step called distlock: {}",
        read_or_empty(&s.path("distlock-called"))
    );
}

/// `distlock status deploy/production` on the scratch store, written to `FILE-$DISTLOCK_FENCE`:
/// a line for a deploy stand-in.
fn status_line(s: &Scratch, file: &str) -> String {
    format!(
        "DISTLOCK_DB='{db}' '{BIN}' status deploy/production >'{file}-'\"$DISTLOCK_FENCE\"\n",
        db = s.db.display(),
        file = s.p(file),
    )
}

#[test]
fn ci_server_step_serialises_deploys_and_renews_the_lease_with_curl_alone() {
    let (s, served, secret) = served("ci-deploy");
    // The deploy stand-in: notes an overlap if another deploy is inside, says when it starts
    // and ends, and runs for 6 s, past the lease (5 s here): only renewals keep the lock.
    let deploy = turn_job(
        &s,
        "deploy.sh",
        &format!("sleep 6\n{}", status_line(&s, "status")),
    );
    // The 5-minute lease made 5 s, so that it is renewed several times while each deploy runs
    // (and, renewed every 1.7 s, kept on a loaded machine).
    let shorter = [("ttl=300", "ttl=5")];
    let steps = [1, 2].map(|run| server_step(&s, &served, &secret, &deploy, &shorter, run));
    let mut expected = vec![step_owner(1, &steps[0]), step_owner(2, &steps[1])];
    for step in steps {
        let done = step.finish(Duration::from_secs(60));
        assert_eq!(done.code(), Some(0), "{}", done.describe());
        assert_secret_kept(&done, &secret);
    }
    assert_no_distlock_on_the_runner(&s);
    // One deploy after the other, each with a tenure of its own.
    let fences = turns_taken(&s, 2);

    // At its end, 6 s in, each deploy still held the lock, with its own fence and owner.
    let log = s.log("deploy/production");
    let mut owners = Vec::new();
    for fence in fences {
        let status: Value =
            serde_json::from_str(&read(&s.path(&format!("status-{fence}")))).expect("JSON");
        assert_eq!(status["held"], true, "renewed past its 5 s lease: {status}");
        assert_eq!(status["lock"]["fence"], fence, "{status}");
        owners.push(status["lock"]["owner"].as_str().expect("owner").to_owned());
        assert_one_tenure(&log, fence, 1, "ci-deploy");
    }
    owners.sort();
    expected.sort();
    assert_eq!(owners, expected);
    assert_eq!(s.holder("deploy/production"), None, "both released");
}

#[test]
fn ci_server_step_releases_the_lock_when_the_deploy_fails_or_the_step_is_cancelled() {
    let (s, served, secret) = served("ci-deploy");
    // A deploy that fails; the lease is the recipe's own 5 minutes, so only a release frees
    // the lock before the test ends.
    let failing = s.script(
        "failing.sh",
        &format!("echo \"$DISTLOCK_FENCE\" >'{}'\nexit 3\n", s.p("failed")),
    );
    let done = server_step(&s, &served, &secret, &failing, &[], 1).finish(Duration::from_secs(30));
    assert_eq!(
        done.code(),
        Some(3),
        "the deploy's status: {}",
        done.describe()
    );
    let fence: i64 = read(&s.path("failed")).trim().parse().expect("a fence");
    assert_eq!(s.holder("deploy/production"), None, "released at once");
    assert_one_tenure(&s.log("deploy/production"), fence, 0, "ci-deploy");

    // A cancelled step (its shell gets SIGTERM): the deploy is stopped first, then the lock
    // released.
    // The deploy stand-in says it started, then runs until SIGTERM, when it looks at the lock
    // before it exits.
    let stopping = status_line(&s, "stopping");
    let slow = s.script(
        "slow.sh",
        &format!(
            "on_term() {{\n{stopping}exit 1\n}}\n\
             trap on_term TERM\n\
             echo \"$DISTLOCK_FENCE\" >'{started}.tmp' && mv '{started}.tmp' '{started}'\n\
             while :; do sleep 0.1; done\n",
            started = s.p("started"),
        ),
    );
    let step = server_step(&s, &served, &secret, &slow, &[], 2);
    wait_for_file(&s.path("started"), Duration::from_secs(20));
    let fence: i64 = read(&s.path("started")).trim().parse().expect("a fence");
    assert!(
        s.holder("deploy/production").is_some(),
        "held while it deploys"
    );
    step.signal(Signal::SIGTERM);
    let done = step.finish(Duration::from_secs(30));
    assert_eq!(done.code(), Some(143), "cancelled: {}", done.describe());
    let during: Value =
        serde_json::from_str(&read(&s.path(&format!("stopping-{fence}")))).expect("JSON");
    assert_eq!(
        during["held"], true,
        "the lock is held until the deploy has stopped: {during}"
    );
    assert_eq!(s.holder("deploy/production"), None, "then released");
    assert_one_tenure(&s.log("deploy/production"), fence, 0, "ci-deploy");
    assert_no_distlock_on_the_runner(&s);
}

#[test]
fn ci_server_step_fails_when_its_wait_runs_out_or_its_token_is_refused() {
    let (s, served, secret) = served("ci-deploy");
    let deploy = s.script("deploy.sh", &format!(": >'{}'\n", s.p("deployed")));

    // Another deploy holds the lock past the step's budget (30 minutes made 2 s).
    let holder = s.hold("deploy/production", "previous-deploy", "60s");
    let done = server_step(
        &s,
        &served,
        &secret,
        &deploy,
        &[("budget=1800", "budget=2")],
        1,
    )
    .finish(Duration::from_secs(30));
    assert_eq!(done.code(), Some(75), "{}", done.describe());
    assert!(
        done.stderr().contains("still busy after 2s") && done.stderr().contains("previous-deploy"),
        "says so, naming the holder: {}",
        done.describe()
    );
    assert_secret_kept(&done, &secret);
    assert_eq!(s.holder("deploy/production"), Some(holder), "untouched");

    // A token the server does not know (401), and one for build/ only (403).
    let tokens = s.path("tokens.json");
    let builds = s.token(&tokens, "ci-build", &["--prefix", "build/"]);
    let reread = served.stderr().lines().count();
    served_reread(&served, reread);
    s.release("deploy/production", "previous-deploy");
    for (run, token, status, why) in [
        (2, UNKNOWN_SECRET, "401", "unauthorized"),
        (3, builds.as_str(), "403", "not-allowed"),
    ] {
        let done =
            server_step(&s, &served, token, &deploy, &[], run).finish(Duration::from_secs(30));
        assert_eq!(done.code(), Some(1), "{status}: {}", done.describe());
        assert!(
            done.stderr().contains(&format!("lock server: {status} "))
                && done.stderr().contains(why),
            "names the server's answer: {}",
            done.describe()
        );
        assert_secret_kept(&done, token);
    }
    assert!(
        !s.path("deployed").exists(),
        "no deploy ran without the lock"
    );
    assert_eq!(s.holder("deploy/production"), None);
    assert_no_distlock_on_the_runner(&s);
}

/// Sends the server SIGHUP and waits until it has reread its files (its stderr grows past
/// `lines` lines with a `SIGHUP:` line).
fn served_reread(served: &Served, lines: usize) {
    nix::sys::signal::kill(served.pid(), Signal::SIGHUP).expect("SIGHUP");
    wait_until(
        Duration::from_secs(20),
        "the server rereads its tokens",
        || {
            served
                .stderr()
                .lines()
                .skip(lines)
                .any(|line| line.starts_with("distlock: SIGHUP: reloaded the tokens"))
        },
    );
}

/// The owners in line for `resource` in the scratch store's queue, first first.
fn in_line(s: &Scratch, resource: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(&s.db).expect("open the store");
    conn.busy_timeout(Duration::from_secs(10))
        .expect("busy timeout");
    let mut rows = conn
        .prepare("SELECT owner FROM waiters WHERE resource = ?1 ORDER BY ticket")
        .expect("query");
    rows.query_map([resource], |row| row.get(0))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect()
}

/// A step cancelled while it waits in line (its shell gets SIGTERM, SIGINT or SIGHUP) ends at
/// once, gives its place up as it exits (the next in line is not held back), and leaves no
/// request behind that a release could still grant (the lock would be held for the lease's
/// five minutes by a step that is gone).
#[test]
fn ci_server_step_cancelled_while_it_waits_gives_its_place_up_at_once() {
    let (s, served, secret) = served("ci-deploy");
    let deploy = s.script("deploy.sh", &format!(": >'{}'\n", s.p("deployed")));
    s.hold("deploy/production", "previous-deploy", "120s");
    for (run, signal) in [
        (1, Signal::SIGTERM),
        (2, Signal::SIGINT),
        (3, Signal::SIGHUP),
    ] {
        let step = server_step(&s, &served, &secret, &deploy, &[], run);
        let owner = step_owner(run, &step);
        wait_until(REQUEST, "the step waits in line", || {
            in_line(&s, "deploy/production") == [owner.as_str()]
        });
        wait_until(REQUEST, "its request is parked on the server", || {
            served.waiting(&secret) == 1
        });
        step.signal(signal);
        let done = step.finish(REQUEST);
        assert_eq!(
            done.code(),
            Some(128 + signal as i32),
            "{signal}: {}",
            done.describe()
        );
        assert!(
            in_line(&s, "deploy/production").is_empty(),
            "{signal}: the place is given up as the step exits"
        );
        assert_eq!(
            served.waiting(&secret),
            0,
            "{signal}: no request left waiting"
        );
    }
    s.release("deploy/production", "previous-deploy");
    assert_eq!(s.holder("deploy/production"), None, "nobody took it since");
    assert!(!s.path("deployed").exists(), "nothing deployed");
    assert_no_distlock_on_the_runner(&s);
}

#[test]
fn ci_server_step_keeps_its_place_in_line_across_long_polls() {
    // One request waits at most 30 s, so this test takes a little over 30 s. The step waits in
    // line first, another pipeline (`distlock acquire --wait` on the store) behind it; after
    // 30 s the step is answered with its position and posts again. Had it lost its place, the
    // other pipeline would be first when the holder lets go.
    let (s, served, secret) = served("ci-deploy");
    let deploy = s.script(
        "deploy.sh",
        &format!(
            "echo \"$DISTLOCK_FENCE\" >'{}'\nsleep 0.5\n",
            s.p("deployed")
        ),
    );
    s.hold("deploy/production", "previous-deploy", "120s");
    let step = server_step(&s, &served, &secret, &deploy, &[], 1);
    let owner = step_owner(1, &step);
    let step_owner = owner.as_str();
    wait_until(REQUEST, "the step waits in line", || {
        in_line(&s, "deploy/production") == [step_owner]
    });
    let other = s.spawn(s.distlock_cmd().args([
        "acquire",
        "deploy/production",
        "--owner",
        "other-pipeline",
        "--ttl",
        "60s",
        "--wait",
        "2m",
    ]));
    wait_until(REQUEST, "the other pipeline waits behind it", || {
        in_line(&s, "deploy/production") == [step_owner, "other-pipeline"]
    });
    let answered = "waiting for deploy/production: position 1";
    wait_until(REQUEST, "the step is answered with its place", || {
        read_or_empty(&s.path("step-1.stdout")).contains(answered)
    });
    wait_until(REQUEST, "the step posts again", || {
        served.waiting(&secret) == 1
    });
    s.release("deploy/production", "previous-deploy");
    let acquired = |log: &[Value]| -> Vec<String> {
        log.iter()
            .filter(|e| e["event"] == "acquired")
            .map(|e| e["owner"].as_str().expect("owner").to_owned())
            .collect()
    };
    wait_until(REQUEST, "the next in line takes the lock", || {
        acquired(&s.log("deploy/production")).len() > 1
    });
    assert_eq!(
        acquired(&s.log("deploy/production"))[1],
        step_owner,
        "the step kept its place across its second request"
    );
    let done = step.finish(REQUEST);
    assert_eq!(done.code(), Some(0), "{}", done.describe());
    let done = other.finish(REQUEST);
    assert_eq!(done.code(), Some(0), "{}", done.describe());
    let log = s.log("deploy/production");
    assert_eq!(
        acquired(&log),
        ["previous-deploy", step_owner, "other-pipeline"]
    );
    let fence: i64 = read(&s.path("deployed")).trim().parse().expect("a fence");
    assert_one_tenure(&log, fence, 0, "ci-deploy");
    s.release("deploy/production", "other-pipeline");
    assert_no_distlock_on_the_runner(&s);
}

// ---------------------------------------------------------------------------------------------
// A Python client

/// A program that uses the module as the recipe shows: `driver.py EXAMPLES RESOURCE OWNER TTL
/// WAIT ACTION [CMD…]` holds RESOURCE with `with lock(…) as held:`, and in its body runs CMD
/// with the fence in `DISTLOCK_FENCE` (ACTION `run`), raises (`raise`), or runs CMD as a long
/// body keeps the lease rule, looking at `held.lost` every 0.1 s and stopping CMD (SIGTERM)
/// once it is set (`steps`), or writes a line to the file CMD names every 0.05 s, calling
/// `held.check()` before each (`checks`), or checks once with its stop already past (`late`). A LockError is printed as `TYPE: MESSAGE` with exit 3; any other
/// exception is Python's (a traceback, 1).
const DRIVER: &str = r#"import os, subprocess, sys, time

sys.path.insert(0, sys.argv[1])
from distlock_client import LockError, lock

resource, owner, ttl, wait, action, *command = sys.argv[2:]
try:
    with lock(resource, owner=owner, ttl=int(ttl), wait=int(wait)) as held:
        env = dict(os.environ, DISTLOCK_FENCE=str(held.fence))
        if action == "raise":
            raise RuntimeError("the deploy failed")
        if action == "late":
            # As if the process had been stopped past its stop and just continued, before the
            # watcher thread runs: the next check must raise.
            held._renewed = time.monotonic() - held.ttl - 1
            held.check()
            print("a step after the stop", file=sys.stderr)
        if action == "checks":
            # Steps of a body that checks the lease before each: one line per step, its wall
            # time in milliseconds, in the file CMD names.
            with open(command[0], "a") as steps:
                for _ in range(1200):
                    held.check()
                    steps.write(f"{time.time_ns() // 1_000_000}\n")
                    steps.flush()
                    time.sleep(0.05)
        if action == "steps":
            child = subprocess.Popen(command, env=env)
            try:
                while child.poll() is None and not held.lost.wait(0.1):
                    pass
            finally:
                child.terminate()
                child.wait()
        else:
            subprocess.run(command, env=env, check=True)
except LockError as error:
    print(f"{type(error).__name__}: {error}", file=sys.stderr)
    sys.exit(3)
"#;

/// `python3 -B ARGS…` with the server's URL and `secret` in `DISTLOCK_URL` and `DISTLOCK_TOKEN`
/// (and over HTTPS its CA in `DISTLOCK_CA_CERT`). (`-B`: importing the module must not leave
/// `__pycache__` in `examples/`.)
fn python(s: &Scratch, served: &Served, secret: &str, args: &[&str]) -> Command {
    let mut cmd = s.cmd("python3");
    cmd.arg("-B")
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("DISTLOCK_URL", &served.url)
        .env("DISTLOCK_TOKEN", secret);
    served.trusted(&mut cmd, "DISTLOCK_CA_CERT");
    cmd
}

/// `driver.py` (see [`DRIVER`]) with these arguments after EXAMPLES.
fn driver(s: &Scratch, served: &Served, secret: &str, args: &[&str]) -> Command {
    let path = s.path("driver.py");
    if !path.exists() {
        std::fs::write(&path, DRIVER).expect("write driver.py");
    }
    let examples = root().join("examples");
    let mut all = vec![
        path.to_str().expect("utf-8"),
        examples.to_str().expect("utf-8"),
    ];
    all.extend(args);
    python(s, served, secret, &all)
}

/// The recipe's command line: `distlock_client.py ARGS…`.
fn client_cli(s: &Scratch, served: &Served, secret: &str, args: &[&str]) -> Command {
    let client = root().join("examples/distlock_client.py");
    let mut all = vec![client.to_str().expect("utf-8")];
    all.extend(args);
    python(s, served, secret, &all)
}

#[test]
fn python_client_is_a_standard_library_module_and_an_executable() {
    let path = root().join("examples/distlock_client.py");
    let text = read(&path);
    assert!(
        text.starts_with("#!/usr/bin/env python3\n"),
        "a python3 script"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&path).expect("stat").permissions(),
    );
    assert_eq!(mode & 0o111, 0o111, "distlock_client.py must be executable");
    let mut imports: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("import "))
        .collect();
    imports.sort_unstable();
    let stdlib = [
        "argparse",
        "ctypes",
        "json",
        "math",
        "os",
        "signal",
        "socket",
        "ssl",
        "subprocess",
        "sys",
        "threading",
        "time",
        "urllib.error",
        "urllib.parse",
        "urllib.request",
    ];
    assert!(
        imports.iter().all(|m| stdlib.contains(m)),
        "the standard library only: {imports:?}"
    );
    assert!(
        !text.lines().any(|l| l.starts_with("from ")),
        "imports are `import M` lines, checked above"
    );
}

#[test]
fn python_client_excludes_across_processes() {
    let (s, served, secret) = served("py");
    // Inside: notes an overlap if another holder is inside, and says when it starts and ends.
    let critical = turn_job(&s, "critical.sh", "sleep 0.5\n");
    let critical = critical.to_str().expect("utf-8");
    // Four processes at once: two use the module's `with lock(…)`, two the command line.
    let mut procs = Vec::new();
    for n in 0..4 {
        let owner = format!("worker-{n}");
        let mut cmd = if n % 2 == 0 {
            driver(
                &s,
                &served,
                &secret,
                &["deploy/prod", &owner, "10", "60", "run", critical],
            )
        } else {
            client_cli(
                &s,
                &served,
                &secret,
                &[
                    "deploy/prod",
                    "--owner",
                    &owner,
                    "--ttl",
                    "10",
                    "--wait",
                    "60",
                    "--",
                    critical,
                ],
            )
        };
        procs.push(s.spawn(&mut cmd));
    }
    for proc in procs {
        let done = proc.finish(REQUEST);
        assert_eq!(done.code(), Some(0), "{}", done.describe());
        assert_secret_kept(&done, &secret);
    }
    let fences = turns_taken(&s, 4);
    let log = s.log("deploy/prod");
    for fence in fences {
        assert_one_tenure(&log, fence, 0, "py");
    }
    assert_eq!(s.holder("deploy/prod"), None);
}

#[test]
fn python_client_renews_the_lease_past_its_ttl() {
    let (s, served, secret) = served("py");
    // The body says it is in, with its fence, and stays until the test says stop.
    let hold = s.script(
        "hold.sh",
        &format!(
            "echo \"$DISTLOCK_FENCE\" >'{entered}.tmp' && mv '{entered}.tmp' '{entered}'\n\
             i=0\n\
             while [ ! -e '{stop}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done\n",
            entered = s.p("entered"),
            stop = s.p("stop"),
        ),
    );
    let ttl = 3;
    let holding = s.spawn(&mut driver(
        &s,
        &served,
        &secret,
        &[
            "deploy/prod",
            "long-job",
            &ttl.to_string(),
            "0",
            "run",
            hold.to_str().expect("utf-8"),
        ],
    ));
    wait_for_file(&s.path("entered"), Duration::from_secs(20));
    let fence: i64 = read(&s.path("entered")).trim().parse().expect("a fence");
    // For more than twice the TTL, the lock stays held by the same tenure.
    let entered = Instant::now();
    let mut looks = 0;
    while entered.elapsed() < Duration::from_secs(2 * ttl + 1) {
        let lock = s
            .holder("deploy/prod")
            .unwrap_or_else(|| panic!("lost after {:?} with a {ttl} s TTL", entered.elapsed()));
        assert_eq!(fence_of(&lock), fence, "{lock}");
        assert_eq!(lock["owner"], "long-job");
        looks += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(looks > 1, "looked only {looks} times");
    std::fs::write(s.path("stop"), "").expect("stop");
    let done = holding.finish(Duration::from_secs(30));
    assert_eq!(done.code(), Some(0), "{}", done.describe());
    assert_eq!(s.holder("deploy/prod"), None, "released at the end");
    // Renewed every ttl/3 (1 s) for 7 s or more: a few renewals at the least.
    assert_one_tenure(&s.log("deploy/prod"), fence, 3, "py");
}

#[test]
fn python_client_raises_when_busy_past_its_wait_and_on_refusals_with_the_servers_detail() {
    let (s, served, secret) = served("py");
    let ran = s.p("ran");
    let touch = ["touch", ran.as_str()];

    // Busy past the wait: Busy, naming the holder.
    let holder = s.hold("deploy/prod", "previous-deploy", "60s");
    let mut args = vec!["deploy/prod", "worker", "10", "1", "run"];
    args.extend(touch);
    let done = s
        .spawn(&mut driver(&s, &served, &secret, &args))
        .finish(REQUEST);
    assert_eq!(done.code(), Some(3), "{}", done.describe());
    assert!(
        done.stderr()
            .starts_with("Busy: deploy/prod is held by previous-deploy (waited 1 s)"),
        "{}",
        done.describe()
    );
    let done = s
        .spawn(&mut client_cli(
            &s,
            &served,
            &secret,
            &["deploy/prod", "--", "touch", &ran],
        ))
        .finish(REQUEST);
    assert_eq!(
        done.code(),
        Some(75),
        "the command line: {}",
        done.describe()
    );
    assert_eq!(s.holder("deploy/prod"), Some(holder), "untouched");
    s.release("deploy/prod", "previous-deploy");

    // A resource outside the token's prefixes (403), and a token the server does not know
    // (401): Refused, with the problem document's detail, never the token.
    for (resource, token, said) in [
        (
            "build/cache",
            secret.as_str(),
            "Refused: acquire build/cache: 403 Forbidden: token py may not use resource build/cache",
        ),
        (
            "deploy/prod",
            UNKNOWN_SECRET,
            "Refused: acquire deploy/prod: 401 Unauthorized: the token is not one this server knows",
        ),
    ] {
        let mut args = vec![resource, "worker", "10", "0", "run"];
        args.extend(touch);
        let done = s
            .spawn(&mut driver(&s, &served, token, &args))
            .finish(REQUEST);
        assert_eq!(done.code(), Some(3), "{}", done.describe());
        assert_eq!(done.stderr(), format!("{said}\n"), "{}", done.describe());
        assert_secret_kept(&done, token);
        let done = s
            .spawn(&mut client_cli(
                &s,
                &served,
                token,
                &[resource, "--", "touch", &ran],
            ))
            .finish(REQUEST);
        assert_eq!(
            done.code(),
            Some(77),
            "the command line: {}",
            done.describe()
        );
        assert_eq!(
            done.stderr(),
            format!(
                "distlock_client: {}\n",
                said.trim_start_matches("Refused: ")
            ),
            "{}",
            done.describe()
        );
        assert_secret_kept(&done, token);
    }
    assert!(!s.path("ran").exists(), "nothing ran without the lock");
}

/// A waiter of the Python client that is interrupted (^C, or TERM from a service manager)
/// gives its place in line up before it exits, as `distlock run` does: the waiter behind it is
/// not held back for the 5 s the server would otherwise keep the place.
#[test]
fn python_client_interrupted_while_waiting_gives_its_place_up_at_once() {
    let (s, served, secret) = served("py");
    let ran = s.p("ran");
    let _holder = s.hold("deploy/prod", "previous-deploy", "60s");
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        let waiter = s.spawn(&mut client_cli(
            &s,
            &served,
            &secret,
            &["deploy/prod", "--wait", "60", "--", "touch", &ran],
        ));
        let started = Instant::now();
        while served.waiting(&secret) == 0 {
            assert!(
                started.elapsed() < REQUEST,
                "the client never waited in line"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        waiter.signal(signal);
        let done = waiter.finish(REQUEST);
        assert_eq!(
            done.code(),
            Some(128 + signal as i32),
            "{signal}: {}",
            done.describe()
        );
        assert!(
            done.stderr().contains("left the queue"),
            "{signal}: {}",
            done.describe()
        );
        // Gone from the queue as the client exits, not 5 s later.
        let (status, body) = served.get("/locks/deploy%2Fprod", &secret);
        assert_eq!(status, 200, "{body}");
        let status: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(
            status["waiting"].as_u64().unwrap_or(0),
            0,
            "{signal}: the place is given up: {body}"
        );
    }
    assert!(!s.path("ran").exists(), "nothing ran without the lock");
}

/// A server with too many waiting requests answers 429 (`--max-waiters-per-token`): the Python
/// client asks again after the pause the server names, while its wait lasts, as `distlock
/// acquire --wait` does, and is busy only once its wait has run out.
#[test]
fn python_client_past_the_servers_bound_on_waiters_asks_again_within_its_wait() {
    let s = Scratch::new();
    let tokens = s.path("tokens.json");
    let secret = s.token(&tokens, "py", &["--prefix", "deploy/"]);
    let served = s.serve_with(&tokens, &["--max-waiters-per-token", "1"]);
    s.hold("deploy/prod", "previous-deploy", "60s");
    // The token's one waiting request.
    let first = s.p("first");
    let mut args = vec![
        "deploy/prod",
        "first",
        "10",
        "60",
        "run",
        "touch",
        first.as_str(),
    ];
    let waiting = s.spawn(&mut driver(&s, &served, &secret, &args));
    wait_until(REQUEST, "the first waits in line", || {
        served.waiting(&secret) == 1
    });
    // A second, past the bound: answered 429 until the first is gone, then in line.
    let second = s.p("second");
    args = vec![
        "deploy/prod",
        "second",
        "10",
        "60",
        "run",
        "touch",
        second.as_str(),
    ];
    let behind = s.spawn(&mut driver(&s, &served, &secret, &args));
    wait_until(REQUEST, "the second is answered 429", || {
        served.stderr().contains("POST /locks/deploy%2Fprod 429")
    });
    // One past the bound whose wait runs out meanwhile: busy once its wait is over, not an
    // error at the first 429.
    args = vec!["deploy/prod", "third", "10", "1", "run", "true"];
    let started = Instant::now();
    let done = s
        .spawn(&mut driver(&s, &served, &secret, &args))
        .finish(REQUEST);
    assert_eq!(done.code(), Some(3), "{}", done.describe());
    assert!(
        done.stderr().starts_with("Busy: deploy/prod"),
        "{}",
        done.describe()
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "asked again within its wait: {}",
        done.describe()
    );
    s.release("deploy/prod", "previous-deploy");
    let done = waiting.finish(REQUEST);
    assert_eq!(done.code(), Some(0), "{}", done.describe());
    let done = behind.finish(REQUEST);
    assert_eq!(done.code(), Some(0), "{}", done.describe());
    assert!(s.path("first").exists() && s.path("second").exists());
}

#[test]
fn python_client_body_stopped_past_its_lease_takes_no_step_after_it_continues() {
    let (s, served, secret) = served("py");
    let steps = s.path("steps");
    let steps_path = steps.to_str().expect("utf-8").to_owned();
    let ttl = 4;
    let body = s.spawn(&mut driver(
        &s,
        &served,
        &secret,
        &[
            "deploy/stopped",
            "body",
            &ttl.to_string(),
            "0",
            "checks",
            &steps_path,
        ],
    ));
    wait_for_file(&steps, Duration::from_secs(20));
    // Stopped (as by SIGSTOP, or ^Z at a terminal) for longer than its lease.
    kill(body.pid(), Signal::SIGSTOP).expect("stop the body");
    std::thread::sleep(Duration::from_secs(ttl + 2));
    let taken = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        });
    let lock = s.hold("deploy/stopped", "next", "30s");
    assert_eq!(
        lock["owner"], "next",
        "the lease ran out while the body was stopped"
    );
    kill(body.pid(), Signal::SIGCONT).expect("continue the body");
    let done = body.finish(Duration::from_secs(30));
    assert_eq!(done.code(), Some(3), "Lost: {}", done.describe());
    let late: Vec<i64> = read(&steps)
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .filter(|&at| at >= taken)
        .collect();
    assert!(
        late.is_empty(),
        "steps taken after the next holder had the lock: {late:?} (taken at {taken})"
    );
}

#[test]
fn python_client_check_raises_once_its_stop_has_passed_even_before_the_watcher_says_so() {
    let (s, served, secret) = served("py");
    let done = s.spawn(&mut driver(
        &s,
        &served,
        &secret,
        &["deploy/late", "body", "30", "0", "late"],
    ));
    let done = done.finish(Duration::from_secs(30));
    assert_eq!(done.code(), Some(3), "Lost: {}", done.describe());
    assert!(done.stderr().contains("Lost:"), "{}", done.describe());
    assert!(
        !done.stderr().contains("a step after the stop"),
        "{}",
        done.describe()
    );
}

#[test]
fn python_client_releases_the_lock_when_the_body_raises() {
    let (s, served, secret) = served("py");
    // A TTL of a minute: only a release frees the lock before the test ends.
    let done = s
        .spawn(&mut driver(
            &s,
            &served,
            &secret,
            &["deploy/prod", "worker", "60", "0", "raise"],
        ))
        .finish(REQUEST);
    assert_eq!(done.code(), Some(1), "{}", done.describe());
    assert!(
        done.stderr().contains("RuntimeError: the deploy failed"),
        "the body's own exception goes on: {}",
        done.describe()
    );
    assert_eq!(s.holder("deploy/prod"), None, "released");
    let log = s.log("deploy/prod");
    assert_one_tenure(&log, fence_of(&log[0]), 0, "py");

    // The command line: a failing command's status, and the lock released.
    let done = s
        .spawn(&mut client_cli(
            &s,
            &served,
            &secret,
            &["deploy/prod", "--ttl", "60", "--", "sh", "-c", "exit 5"],
        ))
        .finish(REQUEST);
    assert_eq!(done.code(), Some(5), "{}", done.describe());
    assert_eq!(s.holder("deploy/prod"), None, "released");
    let log = s.log("deploy/prod");
    assert_eq!(
        log.iter().filter(|e| e["event"] == "released").count(),
        2,
        "two tenures, each released: {log:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The server as a systemd service

/// The value after `flag` in `words`.
fn flag<'a>(words: &[&'a str], flag: &str) -> &'a str {
    let at = words
        .iter()
        .position(|w| *w == flag)
        .unwrap_or_else(|| panic!("ExecStart has {flag}"));
    words
        .get(at + 1)
        .unwrap_or_else(|| panic!("{flag} has a value"))
}

#[test]
fn systemd_serve_unit_serves_https_rereads_on_reload_and_exits_0_on_stop() {
    let s = Scratch::new();
    let unit = Unit::of("distlock-serve.service");
    assert_eq!(unit.setting("Restart"), "on-failure");
    assert_eq!(unit.setting("ExecReload"), "/bin/kill -HUP $MAINPID");
    assert!(
        unit.setting("RestartPreventExitStatus")
            .split_whitespace()
            .any(|code| code == "64"),
        "a usage error is not restarted"
    );
    assert!(!unit.setting("User").is_empty(), "a user of its own");
    assert_eq!(unit.setting("ProtectSystem"), "strict");
    // The files it writes (the store) and that `token add` rewrites beside themselves (the
    // tokens) are in its StateDirectory, the one place ProtectSystem=strict lets it write.
    let state = format!("/var/lib/{}", unit.setting("StateDirectory"));
    assert_eq!(state, "/var/lib/distlock");
    let words: Vec<&str> = unit.exec_start.split_whitespace().collect();
    assert!(
        !unit.exec_start.contains(['"', '\'', '$', '%']),
        "no quoting"
    );
    assert_eq!(&words[..2], ["/usr/local/bin/distlock", "--db"]);
    for written in [flag(&words, "--db"), flag(&words, "--tokens")] {
        assert!(
            written.starts_with(&format!("{state}/")),
            "{written} must be in the StateDirectory {state}"
        );
    }
    let listen = flag(&words, "--listen");
    let addr: SocketAddr = listen.parse().expect("--listen HOST:PORT");
    assert!(
        !addr.ip().is_loopback(),
        "a server for other hosts: {listen}"
    );

    // The unit's paths in a scratch folder: its state, its /etc/distlock, a free port.
    let state_dir = s.path("state");
    let etc = s.path("etc");
    for dir in [&state_dir, &etc] {
        std::fs::create_dir(dir).expect("mkdir");
    }
    let any_port = format!("{}:0", addr.ip());
    let exec_start = replace_each(
        &unit.exec_start,
        &[
            ("/usr/local/bin/distlock", BIN),
            (&state, state_dir.to_str().expect("utf-8")),
            ("/etc/distlock", etc.to_str().expect("utf-8")),
            (listen, &any_port),
        ],
    );
    let argv: Vec<&str> = exec_start.split_whitespace().collect();
    // The certificate chain and key where the unit reads them, made by the test's CA.
    let ca = Ca::new("distlock-serve unit test CA");
    let made = ca.server_files(&etc, "made");
    let files = CertFiles {
        cert: PathBuf::from(flag(&argv, "--tls-cert")),
        key: PathBuf::from(flag(&argv, "--tls-key")),
    };
    std::fs::rename(&made.cert, &files.cert).expect("the certificate where the unit reads it");
    std::fs::rename(&made.key, &files.key).expect("the key where the unit reads it");
    assert!(
        argv.windows(4).any(|w| w == files.args()),
        "ExecStart serves HTTPS with this certificate and key: {exec_start}"
    );
    let tokens = Path::new(flag(&argv, "--tokens"));
    let ci = s.token(tokens, "ci-deploy", &["--prefix", "deploy/"]);

    // ExecStart as systemd starts it: no shell, systemd's PATH, nothing else in the environment.
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..]).env_clear().env("PATH", SYSTEMD_PATH);
    let served = Served::start(&s, &mut cmd, Some(&ca));
    assert_eq!(
        served.get("/health", "").0,
        200,
        "HTTPS, with the CA's certificate"
    );
    let (status, body) = served.post(
        "/locks/deploy%2Fweb",
        &ci,
        &json!({"owner": "ci", "ttl_seconds": 30}),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with(r#"{"acquired":true,"#), "{body}");
    let db = flag(&argv, "--db");
    let status = s.json(&["--db", db, "status", "deploy/web"], 0);
    assert_eq!(
        status["lock"]["owner"], "ci",
        "in the unit's store: {status}"
    );

    // A token made while it runs counts once ExecReload has run.
    let ops = s.token(tokens, "ops", &["--all-resources", "--operator"]);
    assert_eq!(served.get("/locks/deploy%2Fweb", &ops).0, 401, "not yet");
    let reload = replace_each(
        unit.setting("ExecReload"),
        &[("$MAINPID", &served.pid().to_string())],
    );
    let words: Vec<&str> = reload.split_whitespace().collect();
    let out = crate::output(Command::new(words[0]).args(&words[1..])).expect("run ExecReload");
    assert!(out.status.success(), "{reload}: {}", crate::describe(&out));
    let said = [
        format!(
            "distlock: SIGHUP: reloaded the TLS certificate and key ({}, {})",
            files.cert.display(),
            files.key.display()
        ),
        format!(
            "distlock: SIGHUP: reloaded the tokens ({})",
            tokens.display()
        ),
    ];
    wait_until(Duration::from_secs(20), "the reload lines", || {
        let stderr = served.stderr();
        said.iter().all(|line| stderr.lines().any(|l| l == line))
    });
    let (status, body) = served.get("/locks/deploy%2Fweb", &ops);
    assert_eq!(status, 200, "the new token counts: {body}");

    // systemctl stop: SIGTERM, and a clean exit, which Restart=on-failure leaves stopped.
    let stopped = served.stop();
    assert_eq!(stopped.code(), Some(0), "{}", stopped.describe());
    assert_secret_kept(&stopped, &ci);
    assert_secret_kept(&stopped, &ops);

    verify_unit(
        &s,
        "distlock-serve.service",
        &unit.exec_start,
        &replace_each(&unit.exec_start, &[("/usr/local/bin/distlock", BIN)]),
    );
}

// ---------------------------------------------------------------------------------------------
// A CI step through the server, with distlock

/// The CI workflow of a step that runs distlock through a server.
const THROUGH_SERVER: &str = "ci-deploy-through-server.yml";

/// The `env:` block of the one step of the CI workflow `examples/NAME`: each name and value as
/// written.
fn ci_step_env(name: &str) -> Vec<(String, String)> {
    let text = example(name);
    let indent = |line: &str| line.len() - line.trim_start_matches(' ').len();
    assert_eq!(
        text.lines().filter(|l| l.trim() == "env:").count(),
        1,
        "one env: block in {name}"
    );
    let mut lines = text.lines();
    let key = lines
        .by_ref()
        .find(|line| line.trim() == "env:")
        .expect("an env: block");
    lines
        .take_while(|line| indent(line) > indent(key))
        .map(|line| {
            let (name, value) = line
                .trim()
                .split_once(": ")
                .unwrap_or_else(|| panic!("`NAME: VALUE` in env:, not {line:?}"));
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

/// The step of `ci-deploy-through-server.yml` on a runner of its own, as GitHub Actions runs a
/// `run:` line (`bash --noprofile --norc -eo pipefail -c LINE`, with the `settings` changed)
/// in the checkout (the scratch folder, where the test's `./deploy.sh` is): nothing in its
/// environment but `PATH` (with distlock), `HOME` and the step's `env:`, with the server's URL
/// and CA made the test's and `secret` as the value of `${{ secrets.DISTLOCK_TOKEN }}`.
fn through_server_step(s: &Scratch, secret: &str, settings: &[(&str, &str)]) -> Proc {
    let front = s.front.as_ref().expect("a server in front");
    let ca_cert = front.ca_cert().to_str().expect("utf-8 path");
    let mut cmd = Command::new("bash");
    cmd.args(["--noprofile", "--norc", "-eo", "pipefail", "-c"])
        .arg(replace_each(&crate::ci_run_line(THROUGH_SERVER), settings))
        .env_clear()
        .env("PATH", crate::path_with_bin("/usr/bin:/bin"))
        .env("HOME", s.dir.path())
        .current_dir(s.dir.path());
    let env = ci_step_env(THROUGH_SERVER);
    let names: Vec<&str> = env.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["DISTLOCK_DB", "DISTLOCK_TOKEN", "DISTLOCK_CA_CERT"],
        "the server, its token and its CA"
    );
    for (name, value) in &env {
        let site = match name.as_str() {
            "DISTLOCK_DB" => ("https://locks.internal:7443", front.url()),
            "DISTLOCK_TOKEN" => ("${{ secrets.DISTLOCK_TOKEN }}", secret),
            _ => ("/etc/ssl/certs/locks-internal-ca.pem", ca_cert),
        };
        cmd.env(name, replace_each(value, &[site]));
    }
    s.spawn(&mut cmd)
}

#[test]
fn ci_step_through_a_server_serialises_deploys_from_pipelines_on_several_runners() {
    let s = Scratch::new().through_server(&["--prefix", "deploy-"]);
    let front = s.front.as_ref().expect("a server in front");
    // The deploy stand-in: notes an overlap if another deploy is inside, says when it starts
    // and ends and what `distlock status` (through the server too) showed meanwhile. The first
    // to get in stays until the test opens the gate, once the other two wait in line.
    turn_job(
        &s,
        "deploy.sh",
        &format!(
            "distlock status deploy-production >'{status}-'\"$DISTLOCK_FENCE\"\n\
             i=0\n\
             while [ ! -e '{gate}' ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done\n\
             sleep 0.2\n",
            status = s.p("status"),
            gate = s.p("gate"),
        ),
    );
    // See `ci_step_serialises_concurrent_deploys`.
    s.create_store();

    let steps = [1, 2, 3].map(|_| through_server_step(&s, front.secret(), &[]));
    wait_until(REQUEST, "one deploy runs and two wait in line", || {
        read_or_empty(&s.path("events")).lines().count() == 1 && s.waiting("deploy-production") == 2
    });
    std::fs::write(s.path("gate"), "").expect("open the gate");
    for step in steps {
        let done = step.finish(REQUEST);
        assert_eq!(done.code(), Some(0), "{}", done.describe());
        assert_secret_kept(&done, front.secret());
    }

    let fences = turns_taken(&s, 3);
    let log = s.log("deploy-production");
    for fence in fences {
        let status: Value =
            serde_json::from_str(&read(&s.path(&format!("status-{fence}")))).expect("JSON");
        assert_eq!(status["held"], true, "{status}");
        assert_eq!(fence_of(&status["lock"]), fence, "{status}");
        assert_one_tenure(&log, fence, 0, "recipes");
    }
    assert_eq!(s.holder("deploy-production"), None, "free afterwards");
    front.assert_served();
    front.assert_secret_kept_in(s.dir.path());
}

#[test]
fn ci_step_through_a_server_exits_77_when_the_token_is_refused() {
    let s = Scratch::new().through_server(&["--prefix", "deploy-"]);
    s.script("deploy.sh", &format!(": >'{}'\n", s.p("deployed")));
    // A token the server does not know, and a secret that is not set (GitHub Actions then
    // gives the empty string).
    for secret in [UNKNOWN_SECRET, ""] {
        let done = through_server_step(&s, secret, &[]).finish(REQUEST);
        assert_eq!(done.code(), Some(77), "{secret:?}: {}", done.describe());
        let said: Vec<String> = done.stderr().lines().map(str::to_owned).collect();
        assert!(
            said.len() == 1 && said[0].starts_with("distlock: "),
            "one line: {}",
            done.describe()
        );
        assert!(done.stdout().is_empty(), "{}", done.describe());
        if !secret.is_empty() {
            assert_secret_kept(&done, secret);
        }
    }
    assert!(
        !s.path("deployed").exists(),
        "no deploy ran without the lock"
    );
    assert_eq!(s.holder("deploy-production"), None);
}

// ---------------------------------------------------------------------------------------------
// The lease rule: every client stops its job before its lease can end

/// The lease, in seconds, that the lease-rule tests give every client: renewed every 2 s; with
/// no renewal answered, each stops its job 3.9 s after the last renewal that was (and kills it
/// by 5.4 s), before the lease can end at 6 s.
const SHORT_TTL: &str = "6";

/// How the server goes away from the clients that hold locks through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outage {
    /// SIGSTOP: the kernel still accepts connections, and nothing answers them.
    Stopped,
    /// SIGKILL: connections are refused; afterwards the server is started again on its port.
    Killed,
}

/// One client of the server, holding a resource of its own while its job (a critical section
/// in `dir`, [`critical`]) runs.
struct Holder {
    /// Which recipe it is.
    what: &'static str,
    resource: &'static str,
    dir: PathBuf,
    proc: Proc,
    /// The exit code that says the lease was lost, and a line of its stderr that says why.
    lost: (i32, String),
}

/// A folder for the critical section of `name`'s job, and the job: `sh critical-section DIR
/// SECONDS` ([`critical::command`] without its `--`).
fn critical_job(s: &Scratch, name: &str, seconds: &str) -> (PathBuf, Vec<String>) {
    let dir = s.path(name);
    std::fs::create_dir_all(&dir).expect("mkdir the critical section's folder");
    let mut job = critical::command(&dir, seconds);
    job.remove(0);
    (dir, job)
}

/// A script `FILE` that execs `job`: the recipes that run `./deploy.sh` run it.
fn job_script(s: &Scratch, file: &str, job: &[String]) -> PathBuf {
    let words: Vec<String> = job.iter().map(|word| format!("'{word}'")).collect();
    s.script(file, &format!("exec {}\n", words.join(" ")))
}

/// The review's experiment, for every client the project ships: the CI step with curl alone,
/// the Python client's command line and its `with` block, and the CI step with distlock, each
/// holding a resource of its own through one HTTPS server over `s`'s store, with a lease of
/// [`SHORT_TTL`], while its job sits in a critical section. Behind each, a `distlock run
/// --wait` on the store itself waits to enter the same section. Then the server goes away
/// (`outage`) for good: the leases run out and the waiters get in. Each client must have
/// stopped its job before that — the critical sections never held two — and exited with its
/// "lease lost" status, without waiting for the server. Then the server comes back, and each
/// lock is free for a new tenure with a higher fence.
fn every_client_stops_its_job_before_its_lease_can_end(s: Scratch, outage: Outage) {
    let mut s = s.through_server(&["--prefix", "deploy/", "--prefix", "deploy-"]);
    let holders = {
        let front = s.front.as_ref().expect("a server in front");
        let (served, secret) = (&front.served, front.secret());
        let mut holders = Vec::new();

        let (dir, job) = critical_job(&s, "curl-step", "40");
        let deploy = job_script(&s, "curl-deploy.sh", &job);
        let shorter = [("ttl=300", &*format!("ttl={SHORT_TTL}"))];
        holders.push(Holder {
            what: "ci-deploy-server.yml",
            resource: "deploy/production",
            dir,
            proc: server_step(&s, served, secret, &deploy, &shorter, 1),
            lost: (124, "no renewal of deploy/production in time".to_owned()),
        });

        let (dir, job) = critical_job(&s, "py-command", "40");
        let mut args = vec!["deploy/py-command", "--ttl", SHORT_TTL, "--"];
        args.extend(job.iter().map(String::as_str));
        holders.push(Holder {
            what: "distlock_client.py, its command line",
            resource: "deploy/py-command",
            dir,
            proc: s.spawn(&mut client_cli(&s, served, secret, &args)),
            lost: (
                124,
                "distlock_client: renew deploy/py-command: no renewal succeeded in time".to_owned(),
            ),
        });

        let (dir, job) = critical_job(&s, "py-with", "40");
        let mut args = vec!["deploy/py-with", "worker", SHORT_TTL, "0", "steps"];
        args.extend(job.iter().map(String::as_str));
        holders.push(Holder {
            what: "distlock_client.py, a with block",
            resource: "deploy/py-with",
            dir,
            proc: s.spawn(&mut driver(&s, served, secret, &args)),
            lost: (
                3,
                "Lost: renew deploy/py-with: no renewal succeeded in time".to_owned(),
            ),
        });

        let (dir, job) = critical_job(&s, "run-step", "40");
        job_script(&s, "deploy.sh", &job);
        let shorter = [("--wait 20m", &*format!("--ttl {SHORT_TTL} --wait 20m"))];
        holders.push(Holder {
            what: THROUGH_SERVER,
            resource: "deploy-production",
            dir,
            proc: through_server_step(&s, secret, &shorter),
            lost: (
                124,
                "distlock: the lock on deploy-production could not be renewed and may expire; \
                 stopping the command"
                    .to_owned(),
            ),
        });
        holders
    };
    for holder in &holders {
        wait_until(REQUEST, &format!("{}: its job runs", holder.what), || {
            critical::fences(&holder.dir).len() == 1
        });
    }
    // Behind each, a client that opens the store itself, waiting for the section.
    let waiters: Vec<Proc> = holders
        .iter()
        .map(|holder| {
            let mut cmd = s.distlock_cmd();
            s.own_store_env(&mut cmd)
                .args(["run", "--resource", holder.resource, "--wait", "60s"])
                .args(critical::command(&holder.dir, "0.2"));
            s.spawn(&mut cmd)
        })
        .collect();
    for holder in &holders {
        wait_until(REQUEST, &format!("a waiter behind {}", holder.what), || {
            s.waiting(holder.resource) == 1
        });
    }

    let pid = s.front.as_ref().expect("a server in front").served.pid();
    match outage {
        Outage::Stopped => pause_server(&s, pid),
        Outage::Killed => {
            let front = s.front.as_mut().expect("a server in front");
            let proc = front.served.proc.take().expect("a running server");
            proc.signal(Signal::SIGKILL);
            proc.finish(Duration::from_secs(10));
        }
    }

    // The leases run out, and the waiters get in: the jobs before them must be gone by then.
    let waited: Vec<Finished> = waiters.into_iter().map(|w| w.finish(REQUEST)).collect();
    let overlapped: Vec<String> = holders
        .iter()
        .filter_map(|holder| {
            let overlaps = critical::violations(&holder.dir);
            (!overlaps.is_empty()).then(|| format!("{}: {overlaps:?}", holder.what))
        })
        .collect();
    assert!(
        overlapped.is_empty(),
        "jobs ran on past their lease, beside the next holder's: {overlapped:#?}"
    );
    for (holder, done) in holders.iter().zip(&waited) {
        assert_eq!(
            done.code(),
            Some(0),
            "the waiter behind {}: {}",
            holder.what,
            done.describe()
        );
    }
    // Each client has said its lease was lost, and exited, without waiting for the server.
    let mut sections = Vec::new();
    for holder in holders {
        let done = holder.proc.finish(Duration::from_secs(30));
        assert_eq!(
            done.code(),
            Some(holder.lost.0),
            "{}: the lease lost, by its status: {}",
            holder.what,
            done.describe()
        );
        assert!(
            done.stderr().lines().any(|line| line == holder.lost.1),
            "{}: says `{}`: {}",
            holder.what,
            holder.lost.1,
            done.describe()
        );
        sections.push((holder.resource, holder.dir));
    }

    // The server back: each lock is free, for a tenure with a higher fence than both before.
    match outage {
        Outage::Stopped => kill(pid, Signal::SIGCONT).expect("continue the server"),
        Outage::Killed => {
            let front = s.front.as_ref().expect("a server in front");
            let port = front.url().rsplit(':').next().expect("a port");
            let again = s.serve_at(&format!("127.0.0.1:{port}"), &front.serve_args, &front.ca);
            let front = s.front.as_mut().expect("a server in front");
            assert_eq!(again.url, front.served.url, "started again where it was");
            front.served = again;
        }
    }
    for (resource, dir) in &sections {
        let lock = s.hold(resource, "after-the-outage", "10s");
        critical::visit(dir, fence_of(&lock));
        s.release(resource, "after-the-outage");
        let fences = critical::fences(dir);
        assert_eq!(fences.len(), 3, "{resource}: three tenures: {fences:?}");
        assert!(
            critical::violations(dir).is_empty(),
            "{resource}: {fences:?}"
        );
    }
    let front = s.front.as_ref().expect("a server in front");
    front.assert_secret_kept_in(s.dir.path());
}

/// Stops the server `pid` with SIGSTOP, never inside a write of a SQLite store: a server stopped
/// there would keep every other writer out. (On PostgreSQL a write is one round trip, which the
/// database finishes without its client.)
fn pause_server(s: &Scratch, pid: nix::unistd::Pid) {
    let mut tries = 0;
    loop {
        kill(pid, Signal::SIGSTOP).expect("stop the server");
        if s.pg.is_some() || crate::store_writable(&s.db) {
            return;
        }
        tries += 1;
        assert!(tries < 20, "the server keeps the store's write lock");
        kill(pid, Signal::SIGCONT).expect("continue the server");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn lease_rule_every_client_stops_its_job_in_time_while_the_server_is_stopped_over_sqlite() {
    every_client_stops_its_job_before_its_lease_can_end(Scratch::new(), Outage::Stopped);
}

#[test]
fn lease_rule_every_client_stops_its_job_in_time_while_the_server_is_stopped_over_postgres() {
    if let Some(s) = Scratch::postgres("the lease rule over PostgreSQL") {
        every_client_stops_its_job_before_its_lease_can_end(s, Outage::Stopped);
    }
}

#[test]
fn lease_rule_every_client_stops_its_job_in_time_when_the_server_is_killed_over_sqlite() {
    every_client_stops_its_job_before_its_lease_can_end(Scratch::new(), Outage::Killed);
}

#[test]
fn lease_rule_every_client_stops_its_job_in_time_when_the_server_is_killed_over_postgres() {
    if let Some(s) = Scratch::postgres("the lease rule over PostgreSQL") {
        every_client_stops_its_job_before_its_lease_can_end(s, Outage::Killed);
    }
}

/// The curl step, the Python client's command line and its `with` block, each holding a
/// resource of its own through `served` with `secret` and a lease of [`SHORT_TTL`], while its
/// job sits in a critical section; once every job is inside.
fn answered_holders(s: &Scratch, served: &Served, secret: &str, round: u32) -> Vec<Holder> {
    let mut holders = Vec::new();
    let (dir, job) = critical_job(s, &format!("curl-step-{round}"), "40");
    let deploy = job_script(s, &format!("curl-deploy-{round}.sh"), &job);
    let shorter = [("ttl=300", &*format!("ttl={SHORT_TTL}"))];
    holders.push(Holder {
        what: "ci-deploy-server.yml",
        resource: "deploy/production",
        dir,
        proc: server_step(s, served, secret, &deploy, &shorter, round),
        lost: (124, "lost deploy/production: ".to_owned()),
    });
    let (dir, job) = critical_job(s, &format!("py-command-{round}"), "40");
    let mut args = vec!["deploy/py-command", "--ttl", SHORT_TTL, "--"];
    args.extend(job.iter().map(String::as_str));
    holders.push(Holder {
        what: "distlock_client.py, its command line",
        resource: "deploy/py-command",
        dir,
        proc: s.spawn(&mut client_cli(s, served, secret, &args)),
        lost: (124, "distlock_client: renew deploy/py-command: ".to_owned()),
    });
    let (dir, job) = critical_job(s, &format!("py-with-{round}"), "40");
    let mut args = vec!["deploy/py-with", "worker", SHORT_TTL, "0", "steps"];
    args.extend(job.iter().map(String::as_str));
    holders.push(Holder {
        what: "distlock_client.py, a with block",
        resource: "deploy/py-with",
        dir,
        proc: s.spawn(&mut driver(s, served, secret, &args)),
        lost: (3, "Lost: renew deploy/py-with: ".to_owned()),
    });
    for holder in &holders {
        wait_until(REQUEST, &format!("{}: its job runs", holder.what), || {
            critical::fences(&holder.dir).len() == 1
        });
    }
    holders
}

/// Each of `holders` stops its job and exits with its "lease lost" status on a renewal
/// answered `status`: at once, not at its deadline, so its line names the answer; and never
/// shows `secret`.
fn assert_stopped_at_once(holders: Vec<Holder>, status: &str, secret: &str) {
    for holder in holders {
        let done = holder.proc.finish(REQUEST);
        assert_secret_kept(&done, secret);
        assert_eq!(
            done.code(),
            Some(holder.lost.0),
            "{}: the lease lost, by its status: {}",
            holder.what,
            done.describe()
        );
        let said = done
            .stderr()
            .lines()
            .find(|line| line.starts_with(&holder.lost.1))
            .map(str::to_owned);
        assert!(
            said.as_ref().is_some_and(|line| line.contains(status)),
            "{}: `{}…` naming the answer {status}: {}",
            holder.what,
            holder.lost.1,
            done.describe()
        );
        assert!(
            !done.stderr().contains("in time"),
            "{}: stopped on the answer, not at its deadline: {}",
            holder.what,
            done.describe()
        );
        let fences = critical::fences(&holder.dir);
        assert!(
            fences.len() == 1 && critical::violations(&holder.dir).is_empty(),
            "{}: its job left its section when stopped: {fences:?}",
            holder.what
        );
        assert!(
            !holder.dir.join("crit").exists(),
            "{}: its job was stopped",
            holder.what
        );
    }
}

#[test]
fn lease_rule_every_client_stops_its_job_at_once_when_its_lock_is_broken_or_its_token_removed() {
    let (s, served, secret) = served("clients");
    // An operator breaks each lock: the next renewal is answered 404.
    let holders = answered_holders(&s, &served, &secret, 1);
    for holder in &holders {
        s.json(
            &[
                "break",
                holder.resource,
                "--reason",
                "the lease rule's test",
            ],
            0,
        );
    }
    assert_stopped_at_once(holders, "404", &secret);

    // The token is taken away (removed from the file, then SIGHUP): the next renewal is 401.
    let tokens = s.path("tokens.json");
    let taken = s.token(&tokens, "taken-away", &["--prefix", "deploy/"]);
    served_reread(&served, served.stderr().lines().count());
    let holders = answered_holders(&s, &served, &taken, 2);
    let mut file: Value = serde_json::from_str(&read(&tokens)).expect("the tokens file");
    file["tokens"]
        .as_array_mut()
        .expect("a list of tokens")
        .retain(|token| token["name"] != "taken-away");
    std::fs::write(&tokens, file.to_string()).expect("rewrite the tokens file");
    served_reread(&served, served.stderr().lines().count());
    assert_stopped_at_once(holders, "401", &taken);
}

#[path = "one_holder.rs"]
mod one_holder;
