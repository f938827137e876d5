//! The Python client holds a lock one holder at a time whatever happens to it: two processes
//! given the same owner, a signal sent to the client (passed on to the job, which it goes on
//! renewing for; ^Z; SIGKILL, which takes the job with it).
//!
//! The jobs are [`Ticking`]: they log the time while they run and ignore SIGTERM, and behind
//! each a `distlock run --wait` on the store itself writes the time it got in, so that an
//! overlap shows as a tick at or after it.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use serde_json::{Value, json};

use super::{REQUEST, assert_one_tenure, client_cli, critical_job, driver, served};
use crate::critical;
use crate::process::{Proc, wait_until};
use crate::ticks::Ticking;
use crate::{Scratch, fence_of, host_name};

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
