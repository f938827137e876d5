//! distlock behind a connection pooler: a private PgBouncer, started for each test in front of
//! the suite's PostgreSQL server, on a fresh database, in the two `pool_mode`s where waiting
//! works (README, "What a call costs, and connection poolers").
//!
//! - `transaction`: a waiter's `LISTEN` stays on the server connection that ran it, which goes
//!   back to the pool, and PgBouncer drops a notification that reaches a server connection no
//!   client is on ("got packet 'A' from server when not linked" in its log). A waiter finds
//!   this out at its first read that another server session answers, says so in one line on
//!   stderr, and looks again every 250 ms: it is granted within that of a release, in the order
//!   the waiters queued.
//! - `session`: each client keeps its server connection, waiters are woken by the release, and
//!   nothing is said.
//!
//! PgBouncer is set to give each transaction the server connection that has been idle longest
//! (`server_round_robin = 1`), and each transaction-mode test first opens two server
//! connections, so that a client's consecutive transactions land on different server
//! connections, as they do in a busy pool. distlock's commands go through PgBouncer; the
//! test's own reads (the queue, `status`, `log`) go to the server directly, so as not to change
//! which server connection the waiters get.
//!
//! Without pgbouncer the tests are skipped by the gate (`common::require`, tool `PGBOUNCER`);
//! `DISTLOCK_TEST_REQUIRE_PGBOUNCER` (set in CI) makes that a failure. Without a PostgreSQL
//! server they are skipped like every PostgreSQL test (`Db::postgres`).

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::thread::sleep;
use std::time::Duration;

use tempfile::TempDir;

use crate::common::output::timestamp_millis;
use crate::common::pg_url::PgUrl;
use crate::common::process::{Finished, Proc, describe, wait_for, wait_until};
use crate::common::require::{require, runs};
use crate::common::store::{Db, assert_free, distlock_at};

/// What a waiter says, once, when its connection does not keep its `LISTEN`.
const NOTE: &str = "distlock: the PostgreSQL connection does not keep its LISTEN between \
                    transactions (a pooler in transaction mode, such as PgBouncer?): waiting \
                    by looking again every 250 ms instead of being woken\n";

/// How long a waiter may take to notice a release that did not wake it: its 250 ms between
/// looks, with room for a busy machine.
const LOOK_BOUND: Duration = Duration::from_secs(1);

/// The most that the hand-overs of [`session_mode_waiters_are_woken_and_told_nothing`] may
/// take together. A woken waiter takes a few milliseconds; one that looked again every 250 ms
/// (a pause of 125 to 250 ms) would take about 95 ms on average, and eight such hand-overs
/// stay under this bound about once in a hundred runs.
const WOKEN_TOTAL: Duration = Duration::from_millis(400);

/// Waiters queued in [`session_mode_waiters_are_woken_and_told_nothing`].
const SESSION_WAITERS: usize = 8;

/// Spawned processes that outlive this have hung.
const LONG: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy)]
enum PoolMode {
    Session,
    Transaction,
}

impl PoolMode {
    fn as_str(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        }
    }
}

/// The pgbouncer program, if it can run here; else `None`, skipped by the gate.
fn pgbouncer_program() -> Option<&'static str> {
    // Debian installs it in /usr/sbin, which an unprivileged user's PATH may leave out.
    let found = ["pgbouncer", "/usr/sbin/pgbouncer"]
        .into_iter()
        .find(|program| runs(program, &["--version"]).is_ok())
        .ok_or_else(|| "pgbouncer cannot run (apt-get install pgbouncer)".to_owned());
    require("PGBOUNCER", "distlock behind PgBouncer", found)
}

/// A private pgbouncer on a free port of 127.0.0.1, in front of the server of a test's
/// database, killed when dropped.
struct Pgbouncer {
    /// The test's database, through this pgbouncer.
    url: String,
    process: Proc,
    dir: TempDir,
}

impl Pgbouncer {
    /// Starts pgbouncer in `mode` in front of `db`'s server. `None` when pgbouncer is not
    /// installed (see [`pgbouncer_program`]).
    fn start(db: &Db, mode: PoolMode) -> Option<Pgbouncer> {
        let program = pgbouncer_program()?;
        let server = PgUrl::parse(db.pg_url());
        let password = server.password.clone().unwrap_or_default();
        let (host, upstream) = server
            .server
            .rsplit_once(':')
            .unwrap_or((&server.server, "5432"));
        let dir = tempfile::tempdir().expect("temp dir");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let quoted = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
        fs::write(
            dir.path().join("userlist.txt"),
            format!("{} {}\n", quoted(&server.user), quoted(&password)),
        )
        .expect("write userlist.txt");
        // Logs go to stderr (a file, see `Proc`); no Unix socket; the password is kept in
        // plain text, which pgbouncer needs to log in to the server with SCRAM for the client.
        // `options` carries distlock's server-side limits, which pgbouncer would refuse.
        let ini = format!(
            "[databases]\n\
             * = host={host} port={upstream}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = scram-sha-256\n\
             auth_file = {auth}\n\
             pool_mode = {mode}\n\
             server_round_robin = 1\n\
             ignore_startup_parameters = options\n",
            auth = dir.path().join("userlist.txt").display(),
            mode = mode.as_str(),
        );
        let ini_path = dir.path().join("pgbouncer.ini");
        fs::write(&ini_path, ini).expect("write pgbouncer.ini");
        let mut cmd = Command::new(program);
        if nix::unistd::geteuid().is_root() {
            // pgbouncer refuses to run as root; it reads its files first, then becomes this
            // user.
            cmd.args(["-u", "postgres"]);
        }
        cmd.arg(&ini_path);
        let process = Proc::spawn(&mut cmd, dir.path(), "pgbouncer");
        let bouncer = Pgbouncer {
            url: server.with_server(&format!("127.0.0.1:{port}")).to_string(),
            process,
            dir,
        };
        let listening = wait_for(Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(
            listening,
            "pgbouncer (pid {}) does not listen on port {port}: {}",
            bouncer.process.pid(),
            bouncer.log()
        );
        Some(bouncer)
    }

    /// What pgbouncer has logged so far.
    fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("pgbouncer.stderr")).unwrap_or_default()
    }

    /// Opens `n` server connections in the pool: `n` clients each in a transaction at once,
    /// which then end. With `listen`, each transaction also runs `LISTEN distlock`, which
    /// stays on its server connection after the client has gone, as an earlier waiter's does.
    fn open_server_connections(&self, n: usize, listen: bool) {
        let statement = if listen {
            "LISTEN distlock"
        } else {
            "SELECT 1"
        };
        let mut clients: Vec<postgres::Client> = (0..n)
            .map(|_| {
                let mut client = postgres::Client::connect(&self.url, postgres::NoTls)
                    .unwrap_or_else(|e| panic!("connect through pgbouncer: {e}\n{}", self.log()));
                client
                    .batch_execute(&format!("BEGIN; {statement}"))
                    .expect("a transaction through pgbouncer");
                client
            })
            .collect();
        for client in &mut clients {
            client.batch_execute("COMMIT").expect("commit");
        }
    }
}

/// Whether `owner` has a place in R's queue. (Read from the table: a `status` process per look
/// would take longer than a waiter takes to start.)
fn queued(server: &mut postgres::Client, owner: &str) -> bool {
    server
        .query_one(
            "SELECT EXISTS (SELECT FROM distlock.waiters WHERE resource = 'R' AND owner = $1)",
            &[&owner],
        )
        .expect("read distlock.waiters")
        .get(0)
}

/// Hand-overs through `bouncer`: a holder takes R, `n` waiters (`run --wait -- true`, owners
/// w1…wn) queue behind it one after the other, the holder lets go, and each waiter takes R in
/// turn and lets it go. Checks that every waiter got R, in the order they queued, and that R
/// is free at the end. Returns how each waiter ended, and each hand-over's time by the
/// server's clock, from a release to the next waiter's acquire (the log's `at`).
fn hand_overs(db: &Db, bouncer: &Pgbouncer, n: usize) -> (Vec<Finished>, Vec<Duration>) {
    let took = distlock_at(&bouncer.url)
        .args(["acquire", "R", "--owner", "holder", "--ttl", "60"])
        .output()
        .expect("distlock");
    assert_eq!(took.status.code(), Some(0), "holder: {}", describe(&took));
    let mut server = db.pg_client();
    let waiters: Vec<Proc> = (1..=n)
        .map(|i| {
            let owner = format!("w{i}");
            let mut cmd = distlock_at(&bouncer.url);
            cmd.args(["run", "--resource", "R", "--owner", &owner])
                .args(["--wait", "20s", "--", "true"]);
            let waiter = Proc::spawn(&mut cmd, db.dir.path(), &owner);
            wait_until(LONG, &format!("{owner} queues for R"), || {
                sleep(Duration::from_millis(5));
                queued(&mut server, &owner)
            });
            waiter
        })
        .collect();
    // Long enough for every waiter to reach its slowest pace, a look every 250 ms.
    sleep(Duration::from_millis(600));
    let released = distlock_at(&bouncer.url)
        .args(["release", "R", "--owner", "holder"])
        .output()
        .expect("distlock");
    assert_eq!(
        released.status.code(),
        Some(0),
        "holder: {}",
        describe(&released)
    );
    let finished: Vec<Finished> = waiters.into_iter().map(|w| w.finish(LONG)).collect();
    for (i, done) in finished.iter().enumerate() {
        assert_eq!(done.code(), Some(0), "w{}: {}", i + 1, done.describe());
    }
    assert_free(db, "R");

    let log = db.log(&["R"]);
    let seen: Vec<String> = log
        .iter()
        .map(|e| format!("{} {}", e["event"].as_str().unwrap_or("?"), e["owner"]))
        .collect();
    let mut expected = vec![
        "acquired \"holder\"".to_owned(),
        "released \"holder\"".to_owned(),
    ];
    for i in 1..=n {
        expected.push(format!("acquired \"w{i}\""));
        expected.push(format!("released \"w{i}\""));
    }
    assert_eq!(
        seen, expected,
        "the waiters take R in the order they queued"
    );
    let at: Vec<i64> = log
        .iter()
        .map(|e| timestamp_millis(e["at"].as_str().expect("at")))
        .collect();
    let gaps = at
        .chunks(2)
        .zip(at.chunks(2).skip(1))
        .map(|(before, after)| {
            Duration::from_millis(u64::try_from(after[0] - before[1]).unwrap_or(0))
        })
        .collect();
    (finished, gaps)
}

#[test]
fn transaction_mode_waiters_say_so_once_and_take_the_lock_in_order_within_250_ms() {
    let Some(db) = Db::postgres() else { return };
    let Some(bouncer) = Pgbouncer::start(&db, PoolMode::Transaction) else {
        return;
    };
    bouncer.open_server_connections(2, false);
    let (waiters, gaps) = hand_overs(&db, &bouncer, 3);
    eprintln!("transaction mode: hand-overs took {gaps:?}");
    for (i, done) in waiters.iter().enumerate() {
        assert_eq!(done.stderr(), NOTE, "w{}: {}", i + 1, done.describe());
    }
    for gap in &gaps {
        assert!(
            *gap < LOOK_BOUND,
            "a waiter must take a free lock at its next look, within 250 ms; the hand-overs \
             took {gaps:?}"
        );
    }
    // The waiters were not woken: PgBouncer dropped the notifications of the releases.
    eprintln!(
        "pgbouncer dropped {} notifications",
        bouncer
            .log()
            .matches("got packet 'A' from server when not linked")
            .count()
    );
}

#[test]
fn transaction_mode_a_waiter_says_so_also_when_every_server_connection_listens() {
    let Some(db) = Db::postgres() else { return };
    let Some(bouncer) = Pgbouncer::start(&db, PoolMode::Transaction) else {
        return;
    };
    // Each server connection of the pool listens on distlock's channel, as one does after a
    // waiter's LISTEN ran on it: PgBouncer resets nothing between clients in transaction mode.
    bouncer.open_server_connections(2, true);
    let (waiters, gaps) = hand_overs(&db, &bouncer, 1);
    assert_eq!(waiters[0].stderr(), NOTE, "{}", waiters[0].describe());
    assert!(
        gaps[0] < LOOK_BOUND,
        "the waiter must take the free lock at its next look, within 250 ms; it took {gaps:?}"
    );
}

#[test]
fn session_mode_waiters_are_woken_and_told_nothing() {
    let Some(db) = Db::postgres() else { return };
    let Some(bouncer) = Pgbouncer::start(&db, PoolMode::Session) else {
        return;
    };
    let (waiters, gaps) = hand_overs(&db, &bouncer, SESSION_WAITERS);
    eprintln!("session mode: hand-overs took {gaps:?}");
    for (i, done) in waiters.iter().enumerate() {
        assert_eq!(done.stderr(), "", "w{}: {}", i + 1, done.describe());
    }
    let total: Duration = gaps.iter().sum();
    assert!(
        total < WOKEN_TOTAL,
        "a release must wake the next waiter, not leave it to its next look; the hand-overs \
         took {gaps:?}"
    );
}

/// In transaction mode the pooler hands each transaction whichever server connection is free:
/// `list`, `log`, `status` and `gc` of many processes at once, and servers started together,
/// all succeed, as on a direct connection (no statement is prepared by name on one server
/// connection to be used on another).
#[test]
fn transaction_mode_reads_and_servers_of_many_processes_at_once_all_succeed() {
    let Some(db) = Db::postgres() else { return };
    let Some(bouncer) = Pgbouncer::start(&db, PoolMode::Transaction) else {
        return;
    };
    let took = distlock_at(&bouncer.url)
        .args(["acquire", "zz-held", "--owner", "o", "--ttl", "60"])
        .output()
        .expect("distlock");
    assert_eq!(took.status.code(), Some(0), "{}", describe(&took));
    bouncer.open_server_connections(4, false);
    let commands: [&[&str]; 4] = [
        &["list", "--prefix", "zz"],
        &["log", "zz-held", "--limit", "1"],
        &["status", "zz-held"],
        &["gc"],
    ];
    let mut running = Vec::new();
    for round in 0..5 {
        for (i, args) in commands.iter().enumerate() {
            let mut cmd = distlock_at(&bouncer.url);
            cmd.args(*args);
            running.push(Proc::spawn(
                &mut cmd,
                db.dir.path(),
                &format!("read-{round}-{i}"),
            ));
        }
    }
    for done in running.into_iter().map(|p| p.finish(LONG)) {
        assert_eq!(done.code(), Some(0), "{}", done.describe());
    }
    // Servers started together each make (or check) the schema and read, then listen.
    let servers: Vec<Proc> = (0..3)
        .map(|i| {
            let mut cmd = distlock_at(&bouncer.url);
            cmd.args(["serve", "--listen", "127.0.0.1:0"]);
            Proc::spawn(&mut cmd, db.dir.path(), &format!("serve-{i}"))
        })
        .collect();
    for (i, server) in servers.iter().enumerate() {
        wait_until(LONG, &format!("server {i} listens"), || {
            fs::read_to_string(db.dir.path().join(format!("serve-{i}.stderr")))
                .is_ok_and(|text| text.contains("listening on"))
        });
        server.signal(nix::sys::signal::Signal::SIGTERM);
    }
    for server in servers {
        let done = server.finish(LONG);
        assert_eq!(done.code(), Some(0), "{}", done.describe());
    }
}
