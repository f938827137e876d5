//! The lock server's clients that the project ships (the Python client, the CI step with curl
//! alone) hold a lock one holder at a time whatever happens to them: two processes or two jobs
//! given the same owner, a signal sent to the client or to the whole step (passed on to the
//! job, which they go on renewing for; ^Z; SIGKILL, which takes the job with it), a server
//! that goes away while a step waits in line, a release answered 503 while the server's
//! PostgreSQL is away, and a release that finds the lease lost.
//!
//! The jobs are [`Ticking`]: they log the time while they run and ignore SIGTERM, and behind
//! each a `distlock run --wait` on the store itself writes the time it got in, so that an
//! overlap shows as a tick at or after it.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use serde_json::{Value, json};

use super::{
    REQUEST, Served, assert_one_tenure, client_cli, critical_job, driver, in_line, job_script,
    pause_server, served, server_job, server_step, step_owner,
};
use crate::cluster::Cluster;
use crate::critical;
use crate::process::{BIN, Proc, wait_for_file, wait_until};
use crate::ticks::Ticking;
use crate::{Scratch, fence_of, host_name, read};

/// The lease the tests here give their clients: renewed every 1.7 s, and with renewals failing
/// a job is stopped 3.25 s after the last one that succeeded (SIGKILL by 4.5 s).
const TTL: u64 = 5;

/// Waits until `resource` has one waiter in line (on the store itself).
fn wait_for_the_waiter(s: &Scratch, resource: &str) {
    wait_until(REQUEST, &format!("a waiter behind {resource}"), || {
        s.waiting(resource) == 1
    });
}

// ---------------------------------------------------------------------------------------------
// The Python client

#[test]
fn python_client_processes_with_one_owner_hold_the_lock_one_at_a_time() {
    let (s, served, secret) = served("py");
    let owner = "deployer@web-1";
    // Four processes at once with the owner the module's doc shows: two command lines, two
    // `with` blocks; each sits in a critical section for half a second.
    let (dir, job) = critical_job(&s, "section", "0.5");
    let job: Vec<&str> = job.iter().map(String::as_str).collect();
    let mut procs = Vec::new();
    for n in 0..4 {
        let mut cmd = if n % 2 == 0 {
            let mut args = vec!["deploy/prod", owner, "10", "60", "run"];
            args.extend(&job);
            driver(&s, &served, &secret, &args)
        } else {
            let mut args = vec![
                "deploy/prod",
                "--owner",
                owner,
                "--ttl",
                "10",
                "--wait",
                "60",
            ];
            args.push("--");
            args.extend(&job);
            client_cli(&s, &served, &secret, &args)
        };
        procs.push(s.spawn(&mut cmd));
    }
    for proc in procs {
        let done = proc.finish(REQUEST);
        assert_eq!(done.code(), Some(0), "{}", done.describe());
    }
    let fences = critical::fences(&dir);
    assert_eq!(
        fences.len(),
        4,
        "four tenures, one after the other: {fences:?}"
    );
    assert!(
        critical::violations(&dir).is_empty(),
        "two processes of one owner held the lock at once: {:?}",
        critical::violations(&dir)
    );
    let log = s.log("deploy/prod");
    for fence in fences {
        assert_one_tenure(&log, fence, 0, "py");
    }

    // While one holds it, another of the same owner is busy (75), as under `distlock run`.
    let gate = s.path("gate");
    let gated = format!("while [ ! -e '{}' ]; do sleep 0.05; done", gate.display());
    let holder = s.spawn(&mut client_cli(
        &s,
        &served,
        &secret,
        &["deploy/prod", "--owner", owner, "--", "sh", "-c", &gated],
    ));
    wait_until(REQUEST, "the first holds the lock", || {
        s.holder("deploy/prod").is_some()
    });
    let held = s.holder("deploy/prod").expect("held");
    let done = s
        .spawn(&mut client_cli(
            &s,
            &served,
            &secret,
            &["deploy/prod", "--owner", owner, "--", "true"],
        ))
        .finish(REQUEST);
    assert_eq!(done.code(), Some(75), "{}", done.describe());
    assert!(
        done.stderr().contains(&format!("is held by {owner}")),
        "{}",
        done.describe()
    );

    // A waiter of the same owner that is interrupted leaves the queue and nothing else: the
    // lock the first holds stays its.
    let waiter = s.spawn(&mut client_cli(
        &s,
        &served,
        &secret,
        &[
            "deploy/prod",
            "--owner",
            owner,
            "--wait",
            "60",
            "--",
            "true",
        ],
    ));
    wait_until(REQUEST, "the second waits in line", || {
        served.waiting(&secret) == 1
    });
    waiter.signal(Signal::SIGTERM);
    let done = waiter.finish(REQUEST);
    assert_eq!(done.code(), Some(143), "{}", done.describe());
    assert_eq!(
        s.holder("deploy/prod").map(|lock| fence_of(&lock)),
        Some(fence_of(&held)),
        "the interrupted waiter left the holder's lock alone"
    );
    std::fs::write(&gate, "").expect("open the gate");
    let done = holder.finish(REQUEST);
    assert_eq!(done.code(), Some(0), "{}", done.describe());
    assert_eq!(s.holder("deploy/prod"), None, "released");

    // A tenure that a plain acquire took for the owner (with the same token) is joined, and
    // left held for its taker to release, as `distlock run` leaves it.
    let (status, body) = served.post(
        "/locks/deploy%2Fjoined",
        &secret,
        &json!({"owner": owner, "ttl_seconds": 60}),
    );
    assert_eq!(status, 200, "{body}");
    let taken: Value = serde_json::from_str(&body).expect("JSON");
    let done = s
        .spawn(&mut client_cli(
            &s,
            &served,
            &secret,
            &["deploy/joined", "--owner", owner, "--", "true"],
        ))
        .finish(REQUEST);
    assert_eq!(done.code(), Some(0), "{}", done.describe());
    let lock = s.holder("deploy/joined").expect("left held for its taker");
    assert_eq!(fence_of(&lock), fence_of(&taken["lock"]), "{lock}");
    assert_eq!(lock["owner"], owner);
}

#[test]
fn python_client_passes_every_signal_on_and_takes_its_command_with_it() {
    let (s, served, secret) = served("py");
    let mut ticking = Ticking::new(&s);
    let ttl = TTL.to_string();
    let signals = [
        Signal::SIGUSR1,
        Signal::SIGALRM,
        Signal::SIGTSTP,
        Signal::SIGKILL,
    ];
    // One client per signal, each a process group of its own (as a shell's job is), holding
    // a resource of its own while its job ticks; behind each, a waiter on the store itself.
    let mut clients = Vec::new();
    for signal in signals {
        let name = signal.as_str().to_lowercase();
        let resource = format!("deploy/{name}");
        let (log, job) = ticking.command(&s, &name);
        let mut args = vec![resource.as_str(), "--ttl", &ttl, "--"];
        args.extend(job.iter().map(String::as_str));
        let mut cmd = client_cli(&s, &served, &secret, &args);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        clients.push((signal, resource, log, s.spawn(&mut cmd)));
    }
    for (signal, _, log, _) in &clients {
        Ticking::wait_running(log, signal.as_str());
    }
    let waiters: Vec<Proc> = clients
        .iter()
        .map(|(_, resource, log, _)| Ticking::next_holder(&s, resource, log))
        .collect();
    for (_, resource, _, _) in &clients {
        wait_for_the_waiter(&s, resource);
    }
    for (signal, _, _, client) in &clients {
        client.signal(*signal);
    }
    let sent = Instant::now();

    // USR1 and ALRM reach the job, which goes on, and the client goes on renewing for it:
    // past the TTL the lock is still the client's, and the waiters wait.
    for (signal, _, log, _) in &clients[..2] {
        let name = signal.as_str().trim_start_matches("SIG");
        wait_until(REQUEST, &format!("{signal} reaches the job"), || {
            Ticking::signals(log).iter().any(|got| got == name)
        });
    }
    std::thread::sleep(
        (sent + Duration::from_secs(TTL + 1)).saturating_duration_since(Instant::now()),
    );
    for (signal, resource, log, client) in &clients[..2] {
        let lock = s.holder(resource);
        let owner = format!("{}:{}", host_name(), client.pid());
        assert_eq!(
            lock.as_ref().map(|lock| lock["owner"].clone()),
            Some(Value::from(owner)),
            "{signal}: still the client's, past its TTL: {lock:?}"
        );
        assert!(!Ticking::next_is_in(log), "{signal}: the waiter got in");
    }
    // ^Z: the job and the client stop, the lease runs out and the waiter gets in; continued,
    // the client finds its lease lost (124), and its job dies without running again.
    let (_, _, tstp_log, tstp) = &clients[2];
    wait_until(
        REQUEST,
        "the waiter behind the stopped client gets in",
        || Ticking::next_is_in(tstp_log),
    );
    kill(tstp.pid(), Signal::SIGCONT).expect("continue the stopped client");
    // SIGKILL: the job died with the client; the waiter got in when the lease ran out.
    let (_, _, kill_log, _) = &clients[3];
    wait_until(
        REQUEST,
        "the waiter behind the killed client gets in",
        || Ticking::next_is_in(kill_log),
    );
    for (_, _, log, _) in &clients[..2] {
        Ticking::done(log);
    }

    let codes = [Some(0), Some(0), Some(124), None];
    let mut logs = Vec::new();
    for ((signal, _, log, client), code) in clients.into_iter().zip(codes) {
        let done = client.finish(REQUEST);
        assert_eq!(done.code(), code, "{signal}: {}", done.describe());
        logs.push((signal, log));
    }
    for waiter in waiters {
        let done = waiter.finish(REQUEST);
        assert_eq!(done.code(), Some(0), "{}", done.describe());
    }
    for (signal, log) in logs {
        Ticking::assert_gone_before_the_next(&log, &format!("the client sent {signal}"));
    }
}

// ---------------------------------------------------------------------------------------------
// The CI step with curl alone

#[test]
fn ci_server_step_jobs_of_one_workflow_run_deploy_one_at_a_time() {
    // Two jobs of one run (a matrix's legs): the same run id and attempt, here even the same
    // job id and runner name; each deploy sits in a critical section for a second.
    let (s, served, secret) = served("ci-deploy");
    let (dir, job) = critical_job(&s, "section", "1");
    let deploy = job_script(&s, "deploy.sh", &job);
    let steps = ["a", "b"].map(|leg| {
        server_job(
            &s,
            &served,
            &secret,
            &deploy,
            &[],
            7,
            &format!("step-7{leg}"),
        )
    });
    let owners: Vec<String> = steps.iter().map(|step| step_owner(7, step)).collect();
    for step in steps {
        let done = step.finish(REQUEST);
        assert_eq!(done.code(), Some(0), "{}", done.describe());
    }
    assert!(
        critical::violations(&dir).is_empty(),
        "two jobs of one run deployed at once: {:?}",
        critical::violations(&dir)
    );
    let fences = critical::fences(&dir);
    assert_eq!(fences.len(), 2, "{fences:?}");
    let log = s.log("deploy/production");
    let mut holders = Vec::new();
    for fence in fences {
        assert_one_tenure(&log, fence, 0, "ci-deploy");
        let acquired = log
            .iter()
            .find(|e| fence_of(e) == fence && e["event"] == "acquired")
            .expect("acquired");
        holders.push(acquired["owner"].as_str().expect("owner").to_owned());
    }
    holders.sort();
    let mut owners = owners;
    owners.sort();
    assert_eq!(holders, owners, "each job its own owner");
}

#[test]
fn ci_server_step_fails_124_when_its_release_finds_the_lease_lost() {
    let (s, served, secret) = served("ci-deploy");
    let gate = s.path("gate");
    let deploy = s.script(
        "deploy.sh",
        &format!(
            ": >'{started}'\nwhile [ ! -e '{gate}' ]; do sleep 0.05; done\n",
            started = s.p("started"),
            gate = gate.display(),
        ),
    );
    let step = server_step(&s, &served, &secret, &deploy, &[], 1);
    wait_for_file(&s.path("started"), REQUEST);
    // Broken while the deploy runs, between two renewals (100 s apart): the deploy ends
    // without knowing, and the release is the first to hear that the lease was lost.
    s.json(
        &[
            "break",
            "deploy/production",
            "--reason",
            "the release's test",
        ],
        0,
    );
    std::fs::write(&gate, "").expect("open the gate");
    let done = step.finish(REQUEST);
    assert_eq!(done.code(), Some(124), "{}", done.describe());
    assert!(
        done.stderr()
            .lines()
            .any(|line| line.starts_with("lost deploy/production: ") && line.ends_with(" 404")),
        "{}",
        done.describe()
    );
}

#[test]
fn ci_server_step_passes_a_cancellation_on_and_its_deploy_dies_with_it() {
    let (s, served, secret) = served("ci-deploy");
    let mut ticking = Ticking::new(&s);
    let ttl = format!("ttl={TTL}");
    // Two steps at once, each on a resource of its own, each deploy ticking and ignoring
    // SIGTERM; behind each, a waiter on the store itself.
    let mut steps = Vec::new();
    for (run, name) in [(1, "cancelled"), (2, "killed")] {
        let (log, deploy) = ticking.script(&s, &format!("{name}.sh"), name);
        let lock = format!("deploy%2F{name}");
        let settings = [("ttl=300", ttl.as_str()), ("deploy%2Fproduction", &lock)];
        let step = server_job(
            &s,
            &served,
            &secret,
            &deploy,
            &settings,
            run,
            &format!("step-{name}"),
        );
        steps.push((format!("deploy/{name}"), log, step));
    }
    for (resource, log, _) in &steps {
        Ticking::wait_running(log, resource);
    }
    let waiters: Vec<Proc> = steps
        .iter()
        .map(|(resource, log, _)| Ticking::next_holder(&s, resource, log))
        .collect();
    for (resource, _, _) in &steps {
        wait_for_the_waiter(&s, resource);
    }
    // A cancelled step: SIGTERM to every process of the step, as a runner may send it.
    let (cancelled, killed) = (&steps[0], &steps[1]);
    killpg(cancelled.2.pid(), Signal::SIGTERM).expect("SIGTERM to the step's group");
    killpg(killed.2.pid(), Signal::SIGKILL).expect("SIGKILL to the step's group");
    let sent = Instant::now();

    // The cancelled step passed SIGTERM on to its deploy, which goes on, and renews for it.
    wait_until(REQUEST, "SIGTERM reaches the deploy", || {
        Ticking::signals(&cancelled.1)
            .iter()
            .any(|got| got == "TERM")
    });
    std::thread::sleep(
        (sent + Duration::from_secs(TTL + 1)).saturating_duration_since(Instant::now()),
    );
    let owner = step_owner(1, &cancelled.2);
    assert_eq!(
        s.holder(&cancelled.0).map(|lock| lock["owner"].clone()),
        Some(Value::from(owner)),
        "the cancelled step still holds its lock, past its TTL"
    );
    assert!(!Ticking::next_is_in(&cancelled.1), "the waiter got in");
    // The killed step took its deploy with it: the waiter got in when the lease ran out.
    wait_until(REQUEST, "the waiter behind the killed step gets in", || {
        Ticking::next_is_in(&killed.1)
    });

    // The deadline still holds for the cancelled step: its server stopped, the deploy that
    // ignores SIGTERM is killed before the lease can end, and the step fails with 124.
    pause_server(&s, served.pid());
    wait_until(
        REQUEST,
        "the waiter behind the cancelled step gets in",
        || Ticking::next_is_in(&cancelled.1),
    );
    kill(served.pid(), Signal::SIGCONT).expect("continue the server");

    let codes = [Some(124), None];
    let mut logs = Vec::new();
    for ((resource, log, step), code) in steps.into_iter().zip(codes) {
        let done = step.finish(REQUEST);
        assert_eq!(done.code(), code, "{resource}: {}", done.describe());
        logs.push((resource, log));
    }
    for waiter in waiters {
        let done = waiter.finish(REQUEST);
        assert_eq!(done.code(), Some(0), "{}", done.describe());
    }
    for (resource, log) in logs {
        Ticking::assert_gone_before_the_next(&log, &resource);
    }
}

#[test]
fn ci_server_step_is_not_stopped_by_a_terminals_stop_signals() {
    let (s, served, secret) = served("ci-deploy");
    let mut ticking = Ticking::new(&s);
    let ttl = format!("ttl={TTL}");
    let (log, deploy) = ticking.script(&s, "stopped.sh", "stopped");
    let settings = [
        ("ttl=300", ttl.as_str()),
        ("deploy%2Fproduction", "deploy%2Fstopped"),
    ];
    let step = server_job(&s, &served, &secret, &deploy, &settings, 1, "step-stopped");
    Ticking::wait_running(&log, "deploy/stopped");
    let waiter = Ticking::next_holder(&s, "deploy/stopped", &log);
    wait_for_the_waiter(&s, "deploy/stopped");
    // ^Z at a terminal, and a background job's reads and writes there: to the step's group
    // (the step and its renewer; the deploy has a group of its own).
    for signal in [Signal::SIGTSTP, Signal::SIGTTIN, Signal::SIGTTOU] {
        killpg(step.pid(), signal).expect("a stop signal to the step's group");
    }
    std::thread::sleep(Duration::from_secs(TTL + 2));
    assert_eq!(
        s.holder("deploy/stopped").map(|lock| lock["owner"].clone()),
        Some(Value::from(step_owner(1, &step))),
        "the step still holds its lock past its TTL: its renewer was not stopped"
    );
    assert!(
        !Ticking::next_is_in(&log),
        "the waiter got in beside the deploy"
    );
    // The deploy ends; the step releases, and the waiter gets in after it.
    Ticking::done(&log);
    let done = step.finish(REQUEST);
    assert_eq!(done.code(), Some(0), "{}", done.describe());
    let next = waiter.finish(REQUEST);
    assert_eq!(next.code(), Some(0), "{}", next.describe());
    Ticking::assert_gone_before_the_next(&log, "deploy/stopped");
}

#[test]
fn ci_server_step_waits_on_in_line_while_the_server_is_away() {
    let (s, served, secret) = served("ci-deploy");
    let deploy = s.script(
        "deploy.sh",
        &format!("echo \"$DISTLOCK_FENCE\" >'{}'\n", s.p("deployed")),
    );
    // Another deploy holds the lock; the step waits in line behind it.
    let before = s.hold("deploy/production", "previous-deploy", "60s");
    let step = server_step(&s, &served, &secret, &deploy, &[], 1);
    wait_until(REQUEST, "the step waits in line", || {
        in_line(&s, "deploy/production").len() == 1
    });
    // The server is killed, and started again on its port a second later: the step's request
    // is cut, and the next are refused meanwhile.
    let port = served.url.rsplit(':').next().expect("a port").to_owned();
    let mut served = served;
    let proc = served.proc.take().expect("a running server");
    proc.signal(Signal::SIGKILL);
    proc.finish(Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(1));
    let again = serve_on(&s, &format!("127.0.0.1:{port}"));
    assert_eq!(again.url, served.url, "started again where it was");
    s.release("deploy/production", "previous-deploy");

    let done = step.finish(REQUEST);
    assert_eq!(done.code(), Some(0), "{}", done.describe());
    let fence: i64 = read(&s.path("deployed")).trim().parse().expect("a fence");
    assert!(fence > fence_of(&before), "a tenure of its own: {fence}");
    assert_eq!(s.holder("deploy/production"), None, "released");
}

/// `distlock serve --listen LISTEN --tokens tokens.json` over the scratch store, plain HTTP.
fn serve_on(s: &Scratch, listen: &str) -> Served {
    let mut cmd = s.cmd(BIN);
    cmd.args(["serve", "--listen", listen, "--tokens"])
        .arg(s.path("tokens.json"));
    Served::start(s, &mut cmd, None)
}

// ---------------------------------------------------------------------------------------------
// A release answered 503: the server's PostgreSQL away as the jobs end

#[test]
fn clients_release_their_lock_once_the_servers_postgres_is_back() {
    let Some(cluster) = Cluster::start("the release retried while PostgreSQL is away") else {
        return;
    };
    cluster
        .admin()
        .batch_execute("CREATE DATABASE locks")
        .expect("create the store's database");
    let store = cluster.admin_url().replace("/postgres?", "/locks?");
    let s = Scratch::new();
    let tokens = s.path("tokens.json");
    let secret = s.token(&tokens, "clients", &["--prefix", "deploy/"]);
    let mut cmd = s.cmd(BIN);
    cmd.args([
        "--db",
        &store,
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--tokens",
    ])
    .arg(&tokens);
    let served = Served::start(&s, &mut cmd, None);

    // An 18 s lease (renewed every 6 s): PostgreSQL is away for 8 s, longer than the server
    // tries its store for one request, and the lease outlasts that whenever the jobs end.
    let gate = s.path("gate");
    let job = |name: &str| {
        format!(
            ": >'{in_}'\nwhile [ ! -e '{gate}' ]; do sleep 0.05; done\n",
            in_ = s.p(&format!("{name}.in")),
            gate = gate.display(),
        )
    };
    let python = s.spawn(&mut client_cli(
        &s,
        &served,
        &secret,
        &["deploy/py", "--ttl", "18", "--", "sh", "-c", &job("py")],
    ));
    let deploy = s.script("deploy.sh", &job("step"));
    let step = server_step(&s, &served, &secret, &deploy, &[("ttl=300", "ttl=18")], 1);
    for name in ["py", "step"] {
        wait_for_file(&s.path(&format!("{name}.in")), REQUEST);
    }

    std::thread::scope(|scope| {
        let outage = scope.spawn(|| cluster.restart(Duration::from_secs(8)));
        wait_until(REQUEST, "PostgreSQL stops", || {
            TcpStream::connect(cluster.addr()).is_err()
        });
        // The jobs end now: each client's release is answered 503 until PostgreSQL is back.
        std::fs::write(&gate, "").expect("open the gate");
        outage.join().expect("PostgreSQL is back");
    });
    for (what, client) in [
        ("distlock_client.py", python),
        ("ci-deploy-server.yml", step),
    ] {
        let done = client.finish(REQUEST);
        assert_eq!(done.code(), Some(0), "{what}: {}", done.describe());
    }
    let distlock = |args: &[&str]| {
        let mut cmd = s.cmd(BIN);
        cmd.args(["--db", &store]).args(args);
        crate::output(&mut cmd).expect("run distlock")
    };
    for resource in ["deploy/py", "deploy/production"] {
        let status = distlock(&["status", resource]);
        assert_eq!(status.status.code(), Some(1), "{resource}: released");
        let log = String::from_utf8(distlock(&["log", resource]).stdout).expect("utf-8");
        let last: Value = serde_json::from_str(log.lines().last().expect("events")).expect("JSON");
        assert_eq!(
            last["event"], "released",
            "{resource}: released by its client, not ended by its TTL: {log}"
        );
    }
}
