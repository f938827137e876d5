//! The core lock commands — `acquire`, `status`, `release`, `renew` — through the real binary,
//! on real SQLite files (and PostgreSQL, through [`each_store`], when the suite has a server),
//! with real concurrent processes.
//!
//! The seed's attack list and every exit code of the four commands are one table,
//! [`the_seed_attacks_and_every_exit_code_of_the_four_commands`]: a row per attack, named by its
//! id (`ATK-01` … `ATK-12`), and a row per exit code that no attack covers (`release 1`,
//! `renew 0`, …), each with its commands and the exit code and JSON each must answer. The seed's
//! "What NOT to do" table, row by row (HTTP mapped to exit codes: 2xx → 0, 404 → 1, 422 → 64,
//! 403 → 77, "acquired: false" → 75):
//!
//! | anti-pattern                           | covered by                                          |
//! | -------------------------------------- | --------------------------------------------------- |
//! | No UNIQUE(resource) constraint         | row ATK-10, `race_on_a_brand_new_database_file_…`,   |
//! |                                        | `store_has_a_unique_constraint_on_resource`          |
//! | Release without owner check            | row ATK-02                                           |
//! | No TTL on locks                        | `argument_errors_exit_64` (no `--ttl`), rows ATK-03  |
//! |                                        | and ATK-11 (locks expire on their own)               |
//! | Accept TTL of 0 or negative            | row ATK-05                                           |
//! | Return 404 on owner mismatch (release) | row ATK-02 (77, not 1)                               |
//! | Accept string/float as TTL             | row ATK-08                                           |
//! | Store owner without validation         | row ATK-07, `owner_validation_rows_exit_64`          |
//! | No resource length limit               | row ATK-12                                           |
//! | Renew expired locks                    | row `renew 1, expired`                               |
//!
//! Expiry tests use a 1 s TTL and sleep [`PAST_EXPIRY`]; the only timing bounds asserted are the
//! ones the behaviour needs (a wait that runs out took at least about its length).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Child, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use rusqlite::Connection;
use serde_json::{Value, json};

use crate::common::contention::Contention;
use crate::common::output::{
    assert_store_error, assert_usage_error, keys, now_millis, parse_line, rfc3339_millis,
    timestamp_millis,
};
use crate::common::process::{describe, distlock, wait_until};
use crate::common::store::{Db, Kind, distlock_at, each_store_and_server};

/// Long enough after a 1 s lease for it to have run out.
const PAST_EXPIRY: Duration = Duration::from_millis(1200);

/// A lock object as the JSON output shows it, with its times in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LockView {
    resource: String,
    owner: String,
    fence: i64,
    acquired_at: i64,
    expires_at: i64,
}

/// Checks a lock object's exact key set and formats, and reads it.
fn lock_view(value: &Value) -> LockView {
    assert_eq!(
        keys(value),
        ["acquired_at", "expires_at", "fence", "owner", "resource"],
        "lock object {value}"
    );
    let text = |key: &str| {
        value[key]
            .as_str()
            .unwrap_or_else(|| panic!("{key} must be a string in {value}"))
            .to_owned()
    };
    LockView {
        resource: text("resource"),
        owner: text("owner"),
        fence: value["fence"]
            .as_i64()
            .unwrap_or_else(|| panic!("fence must be an integer in {value}")),
        acquired_at: timestamp_millis(&text("acquired_at")),
        expires_at: timestamp_millis(&text("expires_at")),
    }
}

/// `acquire` that must succeed; checks the output's shape and that the lease is exactly `ttl`.
fn acquire(db: &Db, resource: &str, owner: &str, ttl: &str) -> LockView {
    let out = db.json(&["acquire", resource, "--owner", owner, "--ttl", ttl], 0);
    assert_eq!(keys(&out), ["acquired", "lock"], "{out}");
    assert_eq!(out["acquired"], json!(true), "{out}");
    let lock = lock_view(&out["lock"]);
    assert_eq!(lock.resource, resource);
    assert_eq!(lock.owner, owner.trim());
    assert_eq!(
        lock.expires_at - lock.acquired_at,
        ttl_millis(ttl),
        "expires_at - acquired_at must be the ttl {ttl}: {out}"
    );
    lock
}

/// `status`, checking the exact shape of both outcomes: `Some` when held (exit 0), `None`
/// when not (exit 1).
fn status(db: &Db, resource: &str) -> Option<LockView> {
    let (code, value) = db.status(resource);
    if code == 0 {
        assert_eq!(keys(&value), ["held", "lock"], "{value}");
        assert_eq!(value["held"], json!(true), "{value}");
        let lock = lock_view(&value["lock"]);
        assert_eq!(lock.resource, resource);
        Some(lock)
    } else {
        assert_eq!(value, json!({"held": false, "resource": resource}));
        None
    }
}

/// Runs `args` and checks it is a usage error.
fn usage_error(db: &Db, args: &[&str]) {
    assert_usage_error(&db.run(args), &args);
}

/// Runs `f`, checking that it left the store as it found it.
fn untouched(db: &Db, f: impl FnOnce()) {
    let before = db.state();
    f();
    assert_eq!(db.state(), before, "the store must be untouched");
}

fn spawn(db: &Db, args: &[&str]) -> Child {
    db.std_cmd()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn distlock")
}

// ---------------------------------------------------------------------------------------------
// The seed's attacks and every exit code of the four commands, as one table

/// The seed's resource.
const P42: &str = "payment:42";

/// How a [`Step::Acquire`]'s tenure stands to the ones kept before it.
#[derive(Debug, Clone, Copy)]
enum Tenure {
    /// The first tenure the row takes of its resource.
    First,
    /// A new tenure after the kept lock's, which has ended: a larger fence.
    After(&'static str),
    /// The kept lock's own tenure, taken again by its owner: the same fence, a later
    /// `acquired_at`.
    Same(&'static str),
}

/// What a [`Step::Run`] must print.
#[derive(Debug, Clone)]
enum Answer {
    /// Exactly this object.
    Json(Value),
    /// `{"acquired":false,"resource":…,"holder":{"owner":…,"expires_at":…}}`: busy beside the
    /// kept lock.
    Busy(&'static str),
    /// `{"held":true,"lock":…}`: the kept lock, exactly as `acquire` or `renew` last printed it.
    Held(&'static str),
    /// `{"locks":[…]}`: these kept locks, in this order.
    Locks(&'static [&'static str]),
    /// A usage error: nothing on stdout, a message on stderr.
    Usage,
}

/// One command of a [`Row`], and what it must answer.
#[derive(Debug, Clone)]
enum Step {
    /// `acquire RESOURCE --owner OWNER --ttl TTL` exits 0 with a lock of that resource and
    /// (trimmed) owner, acquired now, its lease exactly the ttl; kept as `name`.
    Acquire {
        name: &'static str,
        resource: String,
        owner: &'static str,
        ttl: &'static str,
        tenure: Tenure,
    },
    /// `renew RESOURCE --owner OWNER --ttl TTL` exits 0 with the kept lock `name`'s tenure (its
    /// fence and `acquired_at`), the lease moved to now + ttl; kept as `name` again.
    Renew {
        name: &'static str,
        owner: &'static str,
        ttl: &'static str,
    },
    /// `distlock ARGS…`, with `DISTLOCK_OWNER` set when `owner_env` is, exits `code` and prints
    /// `answer`.
    Run {
        args: Vec<String>,
        owner_env: Option<&'static str>,
        code: i32,
        answer: Answer,
    },
    /// Sleeps until the test's clock is past the kept lock's `expires_at`.
    PastExpiry(&'static str),
    /// Sleeps a little, so that the next command's now is a later millisecond.
    Pause,
    /// A check of the row's own: the history, the SQLite file, racing processes.
    Check(fn(&Db)),
}

impl Step {
    /// Whether the step must leave the store as it found it: every answer but a 0 from
    /// `acquire`, `release` or `renew`, and every `status` and `list`.
    fn changes_nothing(&self) -> bool {
        match self {
            Step::Run { args, code, .. } => *code != 0 || matches!(&*args[0], "status" | "list"),
            Step::Pause => true,
            _ => false,
        }
    }
}

/// One row: the seed's attack or the contract's exit code it is about, and its commands. Each
/// row runs against fresh stores (SQLite, and PostgreSQL when the suite has a server).
struct Row {
    /// `ATK-04` for the seed's attacks, else the command and exit code (`release 1`).
    id: &'static str,
    what: &'static str,
    steps: Vec<Step>,
}

fn acquire_step(
    name: &'static str,
    resource: &str,
    owner: &'static str,
    ttl: &'static str,
    tenure: Tenure,
) -> Step {
    Step::Acquire {
        name,
        resource: resource.to_owned(),
        owner,
        ttl,
        tenure,
    }
}

fn run(args: &[&str], code: i32, answer: Answer) -> Step {
    Step::Run {
        args: args.iter().map(|&a| a.to_owned()).collect(),
        owner_env: None,
        code,
        answer,
    }
}

fn usage(args: &[&str]) -> Step {
    run(args, 64, Answer::Usage)
}

/// A usage error with `owner` in `DISTLOCK_OWNER`.
fn usage_with_owner_env(owner: &'static str, args: &[&str]) -> Step {
    Step::Run {
        args: args.iter().map(|&a| a.to_owned()).collect(),
        owner_env: Some(owner),
        code: 64,
        answer: Answer::Usage,
    }
}

/// `{KEY: false, "resource": RESOURCE, "reason": REASON}`: `release` (`released`) or `renew`
/// (`renewed`) refused, as `not_found` (1) or `forbidden` (77).
fn refused(key: &str, resource: &str, reason: &str) -> Answer {
    Answer::Json(json!({ key: false, "resource": resource, "reason": reason }))
}

/// `{"held":false,"resource":RESOURCE}`: `status` of a missing or expired lock (1).
fn free(resource: &str) -> Answer {
    Answer::Json(json!({"held": false, "resource": resource}))
}

/// Names over the 255-byte limit: just over it, far over it (a 10 MB argument cannot pass
/// through argv on Linux, 128 KiB per argument), and over it in bytes while at most 128
/// characters long.
fn too_long_names() -> [String; 5] {
    [
        "x".repeat(256),
        "x".repeat(100 * 1024),
        "é".repeat(128),
        "€".repeat(86),
        format!("{}€", "a".repeat(253)),
    ]
}

/// The table. `acquire` 0 (a new lock, acquired now, its lease the ttl) opens almost every
/// row, and `status` 0 (the held lock, exactly as printed) closes most; every 1, 64, 75 and 77
/// is also checked to leave the store as it was.
fn rows() -> Vec<Row> {
    use Answer::{Busy, Held, Locks};
    use Tenure::{After, First, Same};
    let held = || acquire_step("held", P42, "w1", "60", First);
    let still_held = || run(&["status", P42], 0, Held("held"));
    // The commands an invalid TTL or owner could slip into: a new lock, the held one, its renewal.
    let with_ttl = |flag: &str| {
        vec![
            usage(&["acquire", "fresh", "--owner", "w1", flag]),
            usage(&["acquire", P42, "--owner", "w1", flag]),
            usage(&["renew", P42, "--owner", "w1", flag]),
        ]
    };
    vec![
        Row {
            id: "ATK-01",
            what: "acquire of a lock another owner holds: 75, naming the holder; nothing changes",
            steps: vec![
                held(),
                run(
                    &["acquire", P42, "--owner", "attacker", "--ttl", "60"],
                    75,
                    Busy("held"),
                ),
                still_held(),
            ],
        },
        Row {
            id: "ATK-02",
            what: "release of a lock another owner holds: 77, not 1, whoever asks",
            steps: [
                vec![held()],
                Vec::from(["attacker", "W1", "w1x"].map(|owner| {
                    run(
                        &["release", P42, "--owner", owner],
                        77,
                        refused("released", P42, "forbidden"),
                    )
                })),
                vec![still_held()],
            ]
            .concat(),
        },
        Row {
            id: "ATK-03",
            what: "after expiry anyone may take the lock (by design): a new tenure, on record; \
                   the old owner's release and renew are then 77",
            steps: vec![
                acquire_step("old", P42, "w1", "1", First),
                Step::PastExpiry("old"),
                acquire_step("stolen", P42, "attacker", "60", After("old")),
                run(
                    &["release", P42, "--owner", "w1"],
                    77,
                    refused("released", P42, "forbidden"),
                ),
                run(
                    &["renew", P42, "--owner", "w1", "--ttl", "60"],
                    77,
                    refused("renewed", P42, "forbidden"),
                ),
                run(&["status", P42], 0, Held("stolen")),
                Step::Check(|db| {
                    let events = db.log(&[P42]);
                    let last = events.last().expect("history");
                    assert_eq!(
                        (&last["event"], &last["owner"], &last["previous_owner"]),
                        (&json!("taken_over"), &json!("attacker"), &json!("w1")),
                        "{events:?}"
                    );
                }),
            ],
        },
        Row {
            id: "ATK-04",
            what: "renew of a lock another owner holds: 77, whatever the ttl",
            steps: [
                vec![held()],
                Vec::from(["3600", "60", "1"].map(|ttl| {
                    run(
                        &["renew", P42, "--owner", "attacker", "--ttl", ttl],
                        77,
                        refused("renewed", P42, "forbidden"),
                    )
                })),
                vec![still_held()],
            ]
            .concat(),
        },
        Row {
            id: "ATK-05",
            what: "a zero or negative TTL: 64, on a new lock, a held one and a renewal",
            steps: [
                vec![held()],
                ["--ttl=0", "--ttl=-1", "--ttl=-100", "--ttl=0s", "--ttl=-5m"]
                    .into_iter()
                    .flat_map(with_ttl)
                    .collect(),
                // `--ttl -100` as two arguments: clap takes `-100` for a flag; still 64.
                vec![
                    usage(&["acquire", "fresh", "--owner", "w1", "--ttl", "-100"]),
                    still_held(),
                    run(&["status", "fresh"], 1, free("fresh")),
                ],
            ]
            .concat(),
        },
        Row {
            id: "ATK-06",
            what: "SQL in the resource is a name like any other, stored as given",
            steps: vec![
                acquire_step("injected", INJECTED, "w1", "60", First),
                acquire_step("always", ALWAYS_TRUE, "w1", "60", First),
                run(&["status", INJECTED], 0, Held("injected")),
                // The table is still there and works for other resources; `' OR '1'='1`
                // matches nothing but itself.
                acquire_step("payment", P42, "w2", "60", First),
                run(&["status", P42], 0, Held("payment")),
                run(&["status", "unrelated"], 1, free("unrelated")),
                run(
                    &["release", ALWAYS_TRUE, "--owner", "w1"],
                    0,
                    Answer::Json(json!({"released": true, "resource": ALWAYS_TRUE})),
                ),
                run(&["list"], 0, Locks(&["payment", "injected"])),
                Step::Check(|db| {
                    if db.kind == Kind::Sqlite {
                        let conn = Connection::open(db.path()).expect("open");
                        let stored: String = conn
                            .query_row(
                                "SELECT resource FROM locks WHERE resource = ?1",
                                [INJECTED],
                                |r| r.get(0),
                            )
                            .expect("the injected name is one row, stored as given");
                        assert_eq!(stored, INJECTED);
                    }
                }),
            ],
        },
        Row {
            id: "ATK-07",
            what: "an empty or blank owner, by flag or DISTLOCK_OWNER: 64 for every command",
            steps: [
                vec![held()],
                ["", " ", "   ", "\t", " \t "]
                    .iter()
                    .flat_map(|&owner| {
                        let flag = format!("--owner={owner}");
                        let by_flag = [
                            usage(&["release", P42, &flag]),
                            usage(&["renew", P42, &flag, "--ttl", "60"]),
                            usage(&["acquire", P42, &flag, "--ttl", "60"]),
                            usage(&["acquire", "fresh", &flag, "--ttl", "60"]),
                        ];
                        let by_env = [
                            &["release", P42][..],
                            &["renew", P42, "--ttl", "60"],
                            &["acquire", "fresh", "--ttl", "60"],
                        ]
                        .map(|args| usage_with_owner_env(owner, args));
                        by_flag.into_iter().chain(by_env)
                    })
                    .collect(),
                vec![still_held(), run(&["status", "fresh"], 1, free("fresh"))],
            ]
            .concat(),
        },
        Row {
            id: "ATK-08",
            what: "a TTL that is not a whole number of seconds — a string, a float, a fraction of \
                   a second, even `3600.0` (a float in the seed's sense, though its value is \
                   whole) — 64",
            steps: [
                vec![held()],
                [
                    "60.5", "1500ms", "0.5", ".5", "\"3600\"", "1e3", "0x10", "abc", "1s500ms",
                    "3600 ", "", "3600.0", "60.", "1.000",
                ]
                .iter()
                .flat_map(|ttl| with_ttl(&format!("--ttl={ttl}")))
                .collect(),
                vec![still_held()],
            ]
            .concat(),
        },
        Row {
            id: "ATK-09",
            what: "the holder acquires again (by design): 0, the same tenure and fence, the lease \
                   moved to now + ttl even when that is earlier; ` w1 ` is `w1`",
            steps: vec![
                acquire_step("t", P42, "w1", "60", First),
                Step::Pause,
                acquire_step("t", P42, "w1", "30", Same("t")),
                Step::Pause,
                acquire_step("t", P42, " w1 ", "60", Same("t")),
                run(&["status", P42], 0, Held("t")),
            ],
        },
        Row {
            id: "ATK-10",
            what: "twenty owners acquire at once: one 0, the others 75 naming it",
            steps: vec![
                acquire_step("warm-up", "warm-up", "w1", "60", First),
                Step::Check(|db| {
                    // Every PostgreSQL racer pays a connection handshake (~60 ms of CPU in a
                    // debug build), so fewer rounds there; the server's row locks see the same
                    // race.
                    let rounds = if db.kind == Kind::Sqlite { 10 } else { 4 };
                    for round in 0..rounds {
                        race(db, &format!("race:{round}"), 20);
                    }
                }),
            ],
        },
        Row {
            id: "ATK-11",
            what: "status of a missing or expired lock: 1, `{\"held\":false,…}` and no stale \
                   lock data",
            steps: vec![
                run(&["status", "nonexistent"], 1, free("nonexistent")),
                // Long enough that the look while it is held (after a look at the whole store,
                // which it must leave as it was) comes before its end on a loaded machine.
                acquire_step("lock", P42, "w1", "5", First),
                run(&["status", P42], 0, Held("lock")),
                Step::PastExpiry("lock"),
                run(&["status", P42], 1, free(P42)),
                run(&["list"], 0, Locks(&[])),
            ],
        },
        Row {
            id: "ATK-12",
            what: "names over 255 bytes of UTF-8: 64 for every command; 255 bytes are fine",
            steps: [
                vec![held()],
                too_long_names()
                    .iter()
                    .flat_map(|name| {
                        assert!(name.len() > 255);
                        [
                            usage(&["acquire", name, "--owner", "w1", "--ttl", "60"]),
                            usage(&["status", name]),
                            usage(&["release", name, "--owner", "w1"]),
                            usage(&["renew", name, "--owner", "w1", "--ttl", "60"]),
                        ]
                    })
                    .collect(),
                vec![
                    still_held(),
                    acquire_step("x255", &"x".repeat(255), "w1", "60", First),
                    acquire_step("euro255", &"€".repeat(85), "w1", "60", First),
                ],
            ]
            .concat(),
        },
        Row {
            id: "release 0",
            what: "release by the holder: 0, and the lock is free for anyone",
            steps: vec![
                held(),
                run(
                    &["release", P42, "--owner", "w1"],
                    0,
                    Answer::Json(json!({"released": true, "resource": P42})),
                ),
                run(&["status", P42], 1, free(P42)),
                acquire_step("next", P42, "w2", "60", After("held")),
            ],
        },
        Row {
            id: "release 1",
            what: "release of a lock never held, or released already: 1, not_found",
            steps: vec![
                run(
                    &["release", P42, "--owner", "w1"],
                    1,
                    refused("released", P42, "not_found"),
                ),
                held(),
                run(
                    &["release", P42, "--owner", "w1"],
                    0,
                    Answer::Json(json!({"released": true, "resource": P42})),
                ),
                run(
                    &["release", P42, "--owner", "w1"],
                    1,
                    refused("released", P42, "not_found"),
                ),
            ],
        },
        Row {
            id: "release 1, expired",
            what: "release of an expired lock: 1, not 77, even for another owner (it belongs to \
                   no one)",
            steps: vec![
                acquire_step("brief", P42, "w1", "1", First),
                Step::PastExpiry("brief"),
                run(
                    &["release", P42, "--owner", "w2"],
                    1,
                    refused("released", P42, "not_found"),
                ),
                run(
                    &["release", P42, "--owner", "w1"],
                    1,
                    refused("released", P42, "not_found"),
                ),
                run(&["status", P42], 1, free(P42)),
            ],
        },
        Row {
            id: "renew 0",
            what: "renew by the holder: 0, the same tenure, the lease moved to now + ttl (a \
                   shorter ttl shortens it)",
            steps: vec![
                held(),
                Step::Pause,
                Step::Renew {
                    name: "held",
                    owner: "w1",
                    ttl: "120",
                },
                still_held(),
                Step::Renew {
                    name: "held",
                    owner: " w1 ",
                    ttl: "10",
                },
                still_held(),
            ],
        },
        Row {
            id: "renew 1",
            what: "renew of a lock never held, or released: 1, not_found, and it creates none",
            steps: vec![
                run(
                    &["renew", P42, "--owner", "w1", "--ttl", "60"],
                    1,
                    refused("renewed", P42, "not_found"),
                ),
                run(&["status", P42], 1, free(P42)),
                held(),
                run(
                    &["release", P42, "--owner", "w1"],
                    0,
                    Answer::Json(json!({"released": true, "resource": P42})),
                ),
                run(
                    &["renew", P42, "--owner", "w1", "--ttl", "60"],
                    1,
                    refused("renewed", P42, "not_found"),
                ),
            ],
        },
        Row {
            id: "renew 1, expired",
            what: "renew of an expired lock: 1 for its owner and for others, and it stays \
                   expired",
            steps: vec![
                acquire_step("brief", P42, "w1", "1", First),
                Step::PastExpiry("brief"),
                run(
                    &["renew", P42, "--owner", "w1", "--ttl", "60"],
                    1,
                    refused("renewed", P42, "not_found"),
                ),
                run(
                    &["renew", P42, "--owner", "w2", "--ttl", "60"],
                    1,
                    refused("renewed", P42, "not_found"),
                ),
                run(&["status", P42], 1, free(P42)),
                acquire_step("next", P42, "w2", "60", After("brief")),
            ],
        },
    ]
}

/// ATK-06's names: a statement ended early, and a condition that is always true.
const INJECTED: &str = "payment:42'; DROP TABLE locks; --";
const ALWAYS_TRUE: &str = "x' OR '1'='1";

/// A kept lock: as last printed, and the instant (store's clock) its lease last began.
struct Kept {
    lock: LockView,
    since: i64,
}

/// The lease a `--ttl` gives, in milliseconds: a humantime form or a bare number of seconds.
fn ttl_millis(ttl: &str) -> i64 {
    let millis = humantime::parse_duration(ttl).map_or_else(
        |_| u128::from(ttl.parse::<u64>().expect("ttl")) * 1000,
        |d| d.as_millis(),
    );
    i64::try_from(millis).expect("ttl in range")
}

/// Plays `row` against `db`: each step's exit code and answer, and that the store is unchanged
/// across every run of steps that must change nothing.
fn play(db: &Db, row: &Row) {
    let mut kept: HashMap<&str, Kept> = HashMap::new();
    // The store before the steps since the last change.
    let mut before: Option<String> = None;
    for step in &row.steps {
        if step.changes_nothing() {
            before.get_or_insert_with(|| db.state());
        } else if let Some(state) = before.take() {
            assert_eq!(
                db.state(),
                state,
                "{}: 1, 64, 75 and 77 change nothing",
                row.id
            );
        }
        match step {
            Step::Acquire {
                name,
                resource,
                owner,
                ttl,
                tenure,
            } => {
                let start = now_millis();
                let lock = acquire(db, resource, owner, ttl);
                // Loose bounds: the store's clock (PostgreSQL's server) need not be this host's.
                assert!(
                    (start - 60_000..=now_millis() + 60_000).contains(&lock.acquired_at),
                    "acquired_at is now: {lock:?}"
                );
                match *tenure {
                    Tenure::First => {}
                    Tenure::After(earlier) => {
                        let earlier = &kept[earlier].lock;
                        assert!(lock.fence > earlier.fence, "{lock:?} after {earlier:?}");
                    }
                    Tenure::Same(earlier) => {
                        let earlier = &kept[earlier].lock;
                        assert_eq!(
                            lock.fence, earlier.fence,
                            "{lock:?} re-acquires {earlier:?}"
                        );
                        assert!(
                            lock.acquired_at > earlier.acquired_at,
                            "acquired_at moves to now: {earlier:?} then {lock:?}"
                        );
                    }
                }
                let since = lock.acquired_at;
                kept.insert(name, Kept { lock, since });
            }
            Step::Renew { name, owner, ttl } => {
                let earlier = &kept[name];
                let resource = earlier.lock.resource.as_str();
                let out = db.json(&["renew", resource, "--owner", owner, "--ttl", ttl], 0);
                assert_eq!(keys(&out), ["lock", "renewed"], "{out}");
                assert_eq!(out["renewed"], json!(true), "{out}");
                let lock = lock_view(&out["lock"]);
                assert_eq!(
                    (lock.fence, lock.acquired_at),
                    (earlier.lock.fence, earlier.lock.acquired_at),
                    "renew keeps the tenure: {lock:?}"
                );
                assert_eq!((&*lock.resource, &*lock.owner), (resource, owner.trim()));
                // expires_at = (the renewal's now) + ttl, a now after the lease last began.
                let since = lock.expires_at - ttl_millis(ttl);
                assert!(
                    (earlier.since..earlier.since + 60_000).contains(&since),
                    "{:?} renewed as {lock:?}",
                    earlier.lock
                );
                kept.insert(*name, Kept { lock, since });
            }
            Step::Run {
                args,
                owner_env,
                code,
                answer,
            } => {
                let mut cmd = db.cmd();
                if let Some(owner) = owner_env {
                    cmd.env("DISTLOCK_OWNER", owner);
                }
                let out = cmd.args(args).output().expect("run distlock");
                if let Answer::Usage = answer {
                    assert_usage_error(&out, &(args, owner_env));
                    continue;
                }
                assert_eq!(
                    out.status.code(),
                    Some(*code),
                    "{args:?}: {}",
                    describe(&out)
                );
                let got = parse_line(&out.stdout);
                match answer {
                    Answer::Json(expected) => assert_eq!(&got, expected, "{args:?}"),
                    Answer::Busy(holder) => {
                        let holder = &kept[holder].lock;
                        let expected = json!({
                            "acquired": false,
                            "resource": holder.resource,
                            "holder": {
                                "owner": holder.owner,
                                "expires_at": rfc3339_millis(holder.expires_at),
                            },
                        });
                        assert_eq!(got, expected, "{args:?}");
                    }
                    Answer::Held(lock) => {
                        assert_eq!(keys(&got), ["held", "lock"], "{got}");
                        assert_eq!(got["held"], json!(true), "{got}");
                        assert_eq!(lock_view(&got["lock"]), kept[lock].lock, "{args:?}");
                    }
                    Answer::Locks(names) => {
                        assert_eq!(keys(&got), ["locks"], "{got}");
                        let locks: Vec<LockView> = got["locks"]
                            .as_array()
                            .unwrap_or_else(|| panic!("locks must be an array in {got}"))
                            .iter()
                            .map(lock_view)
                            .collect();
                        let expected: Vec<&LockView> =
                            names.iter().map(|name| &kept[name].lock).collect();
                        assert_eq!(locks.iter().collect::<Vec<_>>(), expected, "{args:?}");
                    }
                    Answer::Usage => unreachable!("handled above"),
                }
            }
            Step::PastExpiry(name) => {
                let left = kept[name].lock.expires_at + 200 - now_millis();
                sleep(Duration::from_millis(u64::try_from(left).unwrap_or(0)));
            }
            Step::Pause => sleep(Duration::from_millis(30)),
            Step::Check(check) => check(db),
        }
    }
    if let Some(state) = before {
        assert_eq!(
            db.state(),
            state,
            "{}: 1, 64, 75 and 77 change nothing",
            row.id
        );
    }
}

/// How many rows of [`rows`] play at once. Each waits for its own expiries and processes, so
/// together they take a quarter of the time; `.config/nextest.toml` counts this test as that
/// many tests.
const ROWS_AT_ONCE: usize = 4;

/// Every row of [`rows`], [`ROWS_AT_ONCE`] at a time, each against fresh stores of its own and
/// in a thread named after it, so that a failure names its row and the other rows still play.
#[test]
fn the_seed_attacks_and_every_exit_code_of_the_four_commands() {
    let rows = rows();
    let next = AtomicUsize::new(0);
    let failed = Mutex::new(Vec::new());
    thread::scope(|scope| {
        for _ in 0..ROWS_AT_ONCE {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    let Some(row) = rows.get(index) else { break };
                    let played = thread::scope(|inner| {
                        thread::Builder::new()
                            .name(format!("{}: {}", row.id, row.what))
                            .spawn_scoped(inner, || each_store_and_server(|db| play(db, row)))
                            .expect("spawn a row")
                            .join()
                    });
                    if played.is_err() {
                        failed.lock().expect("the failed rows").push(index);
                    }
                }
            });
        }
    });
    let mut failed = failed.into_inner().expect("the failed rows");
    failed.sort_unstable();
    let failed: Vec<&str> = failed.iter().map(|&index| rows[index].id).collect();
    assert!(
        failed.is_empty(),
        "rows that failed (each says why above): {failed:?}"
    );
}

/// Starts `n` acquirers of `resource` with different owners at the same instant, waits for
/// all, and checks that exactly one won and all others were told who did.
fn race(db: &Db, resource: &str, n: usize) {
    let contention = Contention {
        dir: db.dir.path(),
        name: resource,
        workers: n,
        rounds: 1,
        bound: Duration::from_secs(60),
    };
    let contended = contention.run(|i, _| {
        let mut cmd = db.std_cmd();
        cmd.args(["acquire", resource, "--owner", &format!("racer-{i}")])
            .args(["--ttl", "60"]);
        cmd
    });
    let outputs: Vec<Output> = contended
        .ends
        .into_iter()
        .map(|end| end.finished.output)
        .collect();
    let all = || {
        outputs
            .iter()
            .map(describe)
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    let codes: Vec<Option<i32>> = outputs.iter().map(|o| o.status.code()).collect();
    assert!(
        codes.iter().all(|c| matches!(c, Some(0 | 75))),
        "{resource}: only exit 0 and 75 may appear, got {codes:?}\n{}",
        all()
    );
    let winners: Vec<&Output> = outputs
        .iter()
        .filter(|o| o.status.code() == Some(0))
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "{resource}: exactly one winner, got {codes:?}"
    );
    let won = parse_line(&winners[0].stdout);
    let lock = lock_view(&won["lock"]);
    for loser in outputs.iter().filter(|o| o.status.code() == Some(75)) {
        let busy = parse_line(&loser.stdout);
        assert_eq!(busy["holder"]["owner"], json!(lock.owner), "{busy}");
    }
    assert_eq!(status(db, resource), Some(lock));
    // Only the winner wrote anything.
    let log = db.run(&["log", resource]);
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).lines().count(),
        1,
        "{}",
        describe(&log)
    );
}

#[test]
fn race_on_a_brand_new_database_file_has_one_winner() {
    // The schema is created by whichever racer gets there first; the others must wait for it,
    // not mistake the half-made file for someone else's. Several fresh files, because the
    // window is narrow (each round takes well under 100 ms).
    for round in 0..10 {
        let db = Db::sqlite();
        assert!(!db.path().exists());
        race(&db, &format!("fresh:{round}"), 20);
    }
}

// ---------------------------------------------------------------------------------------------
// Fences

#[test]
fn fences_strictly_increase_across_tenures() {
    each_store_and_server(|db| {
        let mut last = i64::MIN;
        // Acquire/release cycles, by the same owner and by others.
        for owner in ["w1", "w2", "w1", "w1", "w3"] {
            let lock = acquire(db, "fenced", owner, "60");
            assert!(lock.fence > last, "{lock:?} after fence {last}");
            assert_eq!(
                status(db, "fenced"),
                Some(lock.clone()),
                "stored as reported"
            );
            last = lock.fence;
            // Re-acquire and renew stay in the tenure.
            assert_eq!(acquire(db, "fenced", owner, "60").fence, last);
            let out = db.json(&["renew", "fenced", "--owner", owner, "--ttl", "60"], 0);
            assert_eq!(lock_view(&out["lock"]).fence, last);
            db.json(&["release", "fenced", "--owner", owner], 0);
        }
        // Across expiry: the same owner coming back starts a new tenure, and so does another.
        let same = acquire(db, "fenced", "w1", "1");
        let other = acquire(db, "fenced:other", "w1", "1");
        assert!(same.fence > last);
        sleep(PAST_EXPIRY);
        let again = acquire(db, "fenced", "w1", "60");
        assert!(again.fence > same.fence, "{again:?} after {same:?}");
        assert_eq!(status(db, "fenced"), Some(again), "stored as reported");
        let taken = acquire(db, "fenced:other", "w2", "60");
        assert!(taken.fence > other.fence, "{taken:?} after {other:?}");
        assert_eq!(
            status(db, "fenced:other"),
            Some(taken),
            "stored as reported"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Validation: every row of the contract's table → 64, a message, nothing on stdout, no change

/// Names over 255 bytes are ATK-12's row of the table above.
#[test]
fn resource_validation_rows_exit_64() {
    let bad = [
        String::new(),
        " ".into(),
        "   ".into(),
        "\t".into(),
        "a\nb".into(),
        "a\tb".into(),
        "a\x7f".into(),
        "a\x01b".into(),
        "\x1b[31mred".into(),
        "a\rb".into(),
        "\x1f".into(),
    ];
    each_store_and_server(|db| {
        let held = acquire(db, "a", "w1", "60");
        untouched(db, || {
            for name in &bad {
                usage_error(db, &["acquire", name, "--owner", "w1", "--ttl", "60"]);
                usage_error(db, &["status", name]);
                usage_error(db, &["release", name, "--owner", "w1"]);
                usage_error(db, &["renew", name, "--owner", "w1", "--ttl", "60"]);
            }
            // Not UTF-8 at all.
            let not_utf8 = OsStr::from_bytes(b"a\xffb");
            let out = db.cmd().arg("status").arg(not_utf8).output().expect("run");
            assert_usage_error(&out, &not_utf8);
            let out = db
                .cmd()
                .args(["acquire", "--owner", "w1", "--ttl", "60"])
                .arg(not_utf8)
                .output()
                .expect("run");
            assert_usage_error(&out, &not_utf8);
        });
        assert_eq!(status(db, "a"), Some(held));
    });
}

#[test]
fn resource_is_taken_as_given_not_trimmed() {
    each_store_and_server(|db| {
        let spaced = acquire(db, " a ", "w1", "60");
        assert_eq!(spaced.resource, " a ");
        // "a" is another lock: free, and w2 may take it.
        assert_eq!(status(db, "a"), None);
        let plain = acquire(db, "a", "w2", "60");
        assert_ne!(plain.fence, 0);
        assert_eq!(status(db, " a ").map(|l| l.owner), Some("w1".into()));
        assert_eq!(status(db, "a").map(|l| l.owner), Some("w2".into()));
        db.json(&["release", "a", "--owner", "w2"], 0);
        assert!(
            status(db, " a ").is_some(),
            "releasing \"a\" left \" a \" alone"
        );
        // Unicode and punctuation are fine as long as there is no control character.
        for name in ["ключ/é", "payment:42#€", "a b", " leading", "trailing "] {
            acquire(db, name, "w1", "60");
        }
    });
}

#[test]
fn owner_is_trimmed() {
    each_store_and_server(|db| {
        let lock = acquire(db, "r", " w1 ", "60");
        assert_eq!(lock.owner, "w1");
        // "w1" is the same owner: a re-acquire, not a busy lock.
        assert_eq!(acquire(db, "r", "w1", "60").fence, lock.fence);
        let out = db.json(&["renew", "r", "--owner", "  w1", "--ttl", "60"], 0);
        assert_eq!(out["lock"]["owner"], json!("w1"));
        db.json(&["release", "r", "--owner", "w1   "], 0);
        // 255 bytes after trimming is fine.
        let long = "o".repeat(255);
        let lock = acquire(db, "long-owner", &format!("  {long}  "), "60");
        assert_eq!(lock.owner, long);
    });
}

/// Empty and blank owners are ATK-07's row of the table above.
#[test]
fn owner_validation_rows_exit_64() {
    let bad = [
        "w\n1".into(),
        "w\t1".into(),
        "w\x7f".into(),
        "w\x01".into(),
        "\x1b[0m".into(),
        "o".repeat(256),
        format!(" {} ", "o".repeat(256)),
    ];
    each_store_and_server(|db| {
        let held = acquire(db, "r", "w1", "60");
        untouched(db, || {
            for owner in &bad {
                let flag = format!("--owner={owner}");
                usage_error(db, &["acquire", "r", &flag, "--ttl", "60"]);
                usage_error(db, &["acquire", "free", &flag, "--ttl", "60"]);
                usage_error(db, &["release", "r", &flag]);
                usage_error(db, &["renew", "r", &flag, "--ttl", "60"]);
            }
            let out = db
                .cmd()
                .args(["release", "r", "--owner"])
                .arg(OsStr::from_bytes(b"w\xff1"))
                .output()
                .expect("run");
            assert_usage_error(&out, &"owner not UTF-8");
        });
        assert_eq!(status(db, "r"), Some(held));
    });
}

#[test]
fn owner_from_distlock_owner_env() {
    each_store_and_server(|db| {
        let with_env = |owner: &str, args: &[&str]| {
            db.cmd()
                .env("DISTLOCK_OWNER", owner)
                .args(args)
                .output()
                .expect("run")
        };
        let out = with_env(" env-owner ", &["acquire", "r", "--ttl", "60"]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert_eq!(parse_line(&out.stdout)["lock"]["owner"], json!("env-owner"));
        // The flag wins over the environment.
        let out = with_env(
            "env-owner",
            &["acquire", "r", "--owner", "w2", "--ttl", "60"],
        );
        assert_eq!(out.status.code(), Some(75), "{}", describe(&out));
        let out = with_env("env-owner", &["renew", "r", "--ttl", "60"]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        // Invalid owners from the environment are usage errors too (blank ones: ATK-07).
        untouched(db, || {
            for owner in ["w\n1", "w\x7f"] {
                for args in [
                    &["acquire", "free", "--ttl", "60"][..],
                    &["release", "r"],
                    &["renew", "r", "--ttl", "60"],
                ] {
                    assert_usage_error(&with_env(owner, args), &(owner, args));
                }
            }
        });
        let out = with_env("env-owner", &["release", "r"]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert_eq!(status(db, "r"), None);
    });
}

/// Zero and negative TTLs are ATK-05's rows of the table above, and strings, floats and
/// fractions ATK-08's: these are the TTLs past the 365-day limit.
#[test]
fn ttl_validation_rows_exit_64() {
    each_store_and_server(|db| {
        let held = acquire(db, "r", "w1", "60");
        untouched(db, || {
            for ttl in ["366d", "365d1s", "10y", "18446744073709551616"] {
                let flag = format!("--ttl={ttl}");
                usage_error(db, &["acquire", "free", "--owner", "w1", &flag]);
                usage_error(db, &["acquire", "r", "--owner", "w1", &flag]);
                usage_error(db, &["renew", "r", "--owner", "w1", &flag]);
            }
        });
        assert_eq!(status(db, "r"), Some(held));
    });
}

#[test]
fn ttl_accepts_humantime_forms_and_bare_seconds() {
    each_store_and_server(|db| {
        for (i, (ttl, millis)) in [
            ("90s", 90_000),
            ("5m", 300_000),
            ("1h30m", 5_400_000),
            ("30", 30_000),
            ("1", 1_000),
            ("1s", 1_000),
            ("2000ms", 2_000),
            ("365d", 31_536_000_000_i64),
        ]
        .into_iter()
        .enumerate()
        {
            let lock = acquire(db, &format!("ttl:{i}"), "w1", ttl);
            assert_eq!(lock.expires_at - lock.acquired_at, millis, "--ttl {ttl}");
            // Renewed with the same form: a lock taken for a minute, so that a 1 s lease has
            // not run out before the renewal comes (a second on a loaded machine); and, since
            // a 1 s renewal may run out before a release could come, none is sent.
            let resource = format!("renewed:{i}");
            let held = acquire(db, &resource, "w1", "60");
            let out = db.json(&["renew", &resource, "--owner", "w1", "--ttl", ttl], 0);
            let renewed = lock_view(&out["lock"]);
            assert!(
                renewed.expires_at - millis >= held.acquired_at,
                "renew --ttl {ttl}"
            );
        }
    });
}

#[test]
fn wait_validation_rows_exit_64() {
    each_store_and_server(|db| {
        let held = acquire(db, "r", "w2", "60");
        untouched(db, || {
            for wait in [
                &["--wait", "-1"][..],
                &["--wait=-1"],
                &["--wait=-5s"],
                &["--wait=abc"],
                &["--wait="],
                &["--wait"],
            ] {
                let mut args = vec!["acquire", "r", "--owner", "w1", "--ttl", "60"];
                args.extend_from_slice(wait);
                usage_error(db, &args);
            }
        });
        assert_eq!(status(db, "r"), Some(held));
        // Zero and fractions are fine: try once, or wait a little.
        for wait in ["0", "0.2", "100ms"] {
            db.json(
                &[
                    "acquire", "r", "--owner", "w1", "--ttl", "60", "--wait", wait,
                ],
                75,
            );
        }
    });
}

#[test]
fn argument_errors_exit_64() {
    each_store_and_server(|db| {
        let held = acquire(db, "r", "w1", "60");
        untouched(db, || {
            for args in [
                &["acquire", "r", "--owner", "w2", "--ttl", "60", "--bogus"][..],
                &["--bogus", "status", "r"],
                &["status", "r", "-x"],
                &["acquire", "r", "--owner", "w2", "--ttl"],
                &["acquire", "r", "--ttl", "60", "--owner"],
                &["acquire", "r", "--ttl", "60"],
                &["acquire", "r", "--owner", "w2"],
                &["acquire", "--owner", "w2", "--ttl", "60"],
                &["release", "r"],
                &["release", "--owner", "w2"],
                &["renew", "r", "--owner", "w1"],
                &["renew", "r", "--ttl", "60"],
                &["status"],
                &["status", "r", "extra"],
                &["release", "r", "--owner", "w1", "--ttl", "60"],
                &[],
                &["frobnicate"],
                &["--format", "yaml", "status", "r"],
                &["--format"],
                &["--db"],
            ] {
                usage_error(db, args);
            }
        });
        assert_eq!(status(db, "r"), Some(held));
    });
}

#[test]
fn usage_errors_never_create_the_database() {
    let db = Db::sqlite();
    for args in [
        &["acquire", "", "--owner", "w1", "--ttl", "60"][..],
        &["acquire", "r", "--owner", " ", "--ttl", "60"],
        &["acquire", "r", "--owner", "w1", "--ttl", "0"],
        &["acquire", "r", "--owner", "w1", "--ttl", "60", "--wait=-1"],
        &["status", "a\nb"],
        &["release", "r"],
        &["renew", "r", "--owner", "w1", "--ttl", "60.5"],
        &["acquire", "r", "--owner", "w1", "--ttl", "60", "--bogus"],
    ] {
        usage_error(&db, args);
    }
    for name in &too_long_names() {
        usage_error(&db, &["acquire", name, "--owner", "w1", "--ttl", "60"]);
    }
    assert!(
        !db.path().exists(),
        "a usage error must not create the store"
    );
}

#[test]
fn help_and_version_exit_0() {
    let db = Db::sqlite();
    for args in [
        &["--help"][..],
        &["-h"],
        &["help"],
        &["help", "acquire"],
        &["acquire", "--help"],
        &["status", "--help"],
        &["release", "--help"],
        &["renew", "--help"],
        &["--version"],
        &["-V"],
    ] {
        let out = db.run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", describe(&out));
        assert!(!out.stdout.is_empty(), "{args:?} prints on stdout");
    }
    let out = db.run(&["--version"]);
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(
        version.contains(env!("CARGO_PKG_VERSION")),
        "--version names the version: {version:?}"
    );
    assert!(
        !db.path().exists(),
        "--help and --version do not touch the store"
    );
}

// ---------------------------------------------------------------------------------------------
// acquire --wait

#[test]
fn acquire_wait_succeeds_once_the_holder_releases() {
    each_store_and_server(|db| {
        let held = acquire(db, "deploy", "holder", "60");
        let mut waiter = spawn(
            db,
            &[
                "acquire", "deploy", "--owner", "waiter", "--ttl", "60", "--wait", "10s",
            ],
        );
        sleep(Duration::from_millis(500));
        assert!(
            waiter.try_wait().expect("try_wait").is_none(),
            "the waiter must still be waiting while the lock is held"
        );
        db.json(&["release", "deploy", "--owner", "holder"], 0);
        let out = waiter.wait_with_output().expect("wait");
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let lock = lock_view(&parse_line(&out.stdout)["lock"]);
        assert_eq!(lock.owner, "waiter");
        assert!(lock.fence > held.fence, "{lock:?} after {held:?}");
        assert_eq!(status(db, "deploy"), Some(lock));
    });
}

#[test]
fn acquire_wait_exits_75_when_the_wait_runs_out() {
    each_store_and_server(|db| {
        let held = acquire(db, "deploy", "holder", "60");
        let start = Instant::now();
        let out = db.run(&[
            "acquire", "deploy", "--owner", "waiter", "--ttl", "60", "--wait", "1s",
        ]);
        let took = start.elapsed();
        assert_eq!(out.status.code(), Some(75), "{}", describe(&out));
        assert!(
            took >= Duration::from_millis(900),
            "--wait 1s gave up after {took:?}"
        );
        assert!(took < Duration::from_secs(10), "--wait 1s took {took:?}");
        let busy = parse_line(&out.stdout);
        assert_eq!(keys(&busy), ["acquired", "holder", "resource"]);
        assert_eq!(busy["acquired"], json!(false));
        assert_eq!(busy["holder"]["owner"], json!("holder"));
        assert_eq!(status(db, "deploy"), Some(held));
    });
}

// ---------------------------------------------------------------------------------------------
// The SQLite store itself

#[test]
fn store_uses_wal_mode() {
    let db = Db::sqlite();
    acquire(&db, "r", "w1", "60");
    let conn = Connection::open(db.path()).expect("open");
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("journal_mode");
    assert_eq!(mode.to_lowercase(), "wal");
}

/// The fsync calls of one `distlock ARGS…` on `db`, as `strace -y` prints them (each with the
/// path of the file it syncs). `None` without strace, through the gate ([`Db::strace`]).
fn fsyncs_of(db: &Db, args: &[&str]) -> Option<Vec<String>> {
    let trace = db.strace("the fsyncs of a commit", "fsync,fdatasync", args)?;
    Some(
        trace
            .lines()
            .filter(|line| line.contains("fsync(") && line.contains(" = 0"))
            .map(str::to_owned)
            .collect(),
    )
}

#[test]
fn durable_commits_cost_one_fsync_and_a_new_store_syncs_its_folder() {
    let db = Db::sqlite();
    let folder = db.dir.path().to_str().expect("utf-8 path").to_owned();
    // Creating the store: the folder entries of the database and its WAL are made durable.
    let Some(first) = fsyncs_of(&db, &["acquire", "r1", "--owner", "w", "--ttl", "60"]) else {
        return;
    };
    assert!(
        first
            .iter()
            .any(|line| line.contains(&format!("<{folder}>"))),
        "creating the store must fsync its folder {folder}: {first:#?}"
    );
    // From then on: one fsync per durable commit (the WAL), no folder, none for a release.
    let wal = format!("<{}-wal>", db.url);
    for args in [
        &["acquire", "r2", "--owner", "w", "--ttl", "60"][..],
        &["renew", "r2", "--owner", "w", "--ttl", "60"],
        &["acquire", "r3", "--owner", "w", "--ttl", "60"],
    ] {
        let synced = fsyncs_of(&db, args).expect("strace ran a moment ago");
        assert!(
            synced.len() == 1 && synced[0].contains(&wal),
            "{args:?}: exactly one fsync, of the WAL: {synced:#?}"
        );
    }
    let released = fsyncs_of(&db, &["release", "r2", "--owner", "w"]).expect("strace");
    assert!(
        released.is_empty(),
        "a release is not synced: {released:#?}"
    );
}

/// The WAL's frames that SQLite would read as its log: from the first, those whose header
/// carries the salt of the WAL's header (a 32-byte header, then 4120 bytes a frame: 24 of
/// header, salts at 8..16, and the page). A restarted WAL gets a new salt, and the frames of its
/// earlier round that it overwrites no further are stale. Also the file's length in frames.
fn wal_frames(db: &Db) -> (u64, u64) {
    let wal = std::path::PathBuf::from(format!("{}-wal", db.url));
    let Ok(bytes) = std::fs::read(wal) else {
        return (0, 0);
    };
    let length = bytes.len().saturating_sub(32) / 4120;
    let live = (0..length)
        .take_while(|i| {
            let frame = 32 + i * 4120;
            bytes.get(16..24) == bytes.get(frame + 8..frame + 16)
        })
        .count();
    (live as u64, length as u64)
}

#[test]
fn the_wal_stays_bounded_and_grows_longer_only_while_waiters_wait() {
    let db = Db::sqlite();
    // Nobody waits: it is checkpointed and restarted once past 100 frames, so it never holds
    // much more. Each process opens the database alone, and still the commits after a restart
    // overwrite the file from its start instead of growing it.
    let mut longest = 0;
    let mut lengths = Vec::new();
    for _ in 0..40 {
        acquire(&db, "r", "w", "60");
        db.json(&["release", "r", "--owner", "w"], 0);
        let (live, length) = wal_frames(&db);
        longest = longest.max(live);
        lengths.push(length);
    }
    assert!(
        longest <= 120,
        "the WAL reached {longest} frames with nobody waiting"
    );
    let restarted = lengths.iter().position(|&length| length > 100);
    assert!(
        lengths.iter().all(|&length| length <= 120)
            && restarted.is_some_and(|at| lengths[at..].iter().all(|&length| length > 100)),
        "the WAL's file was not kept and reused once restarted: {lengths:?} frames"
    );
    // Someone waits: the holder's checkpoint would stand between its release and the waiter,
    // so the WAL may grow up to ten times longer.
    acquire(&db, "r", "holder", "60");
    let waiter = db.spawn(
        &[
            "acquire", "r", "--owner", "waiter", "--ttl", "60", "--wait", "60s",
        ],
        "waiter",
    );
    wait_until(Duration::from_secs(15), "the waiter queues", || {
        db.waiting("r") == 1
    });
    let mut frames = Vec::new();
    for _ in 0..60 {
        db.json(&["renew", "r", "--owner", "holder", "--ttl", "60"], 0);
        frames.push(wal_frames(&db).0);
    }
    assert!(
        frames.windows(2).all(|w| w[0] <= w[1]) && frames[frames.len() - 1] > 120,
        "the WAL was checkpointed while a waiter waited: {frames:?}"
    );
    // The waiter gives up, leaving nobody waiting: its process checkpoints the WAL as it exits,
    // and restarts it with one frame that rewrites its header.
    waiter.signal(Signal::SIGTERM);
    let left = waiter.finish(Duration::from_secs(20));
    assert_eq!(left.code(), Some(128 + 15), "{}", left.describe());
    assert_eq!(db.waiting("r"), 0);
    let (live, length) = wal_frames(&db);
    assert!(
        live <= 1 && length > 120,
        "the WAL was not restarted in place once nobody waited: {live} of {length} frames"
    );
}

#[test]
fn a_wal_grown_long_behind_a_reader_is_cut_back_once_checkpointed() {
    let db = Db::sqlite();
    acquire(&db, "r", "w", "60");
    // A reader's snapshot keeps every checkpoint from finishing, so the WAL grows past the
    // ~1,000 frames a restarted WAL may keep.
    let reader = Connection::open(db.path()).expect("open");
    // As distlock's own connections: closing it must not checkpoint (and delete) the WAL.
    reader
        .set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .expect("no checkpoint on close");
    reader
        .execute_batch("BEGIN; SELECT count(*) FROM locks;")
        .expect("a read snapshot");
    let mut length = 0;
    while length <= 1100 {
        for _ in 0..20 {
            db.json(&["renew", "r", "--owner", "w", "--ttl", "60"], 0);
        }
        length = wal_frames(&db).1;
    }
    // Once the reader is gone, the next process checkpoints, restarts the WAL and cuts the file.
    reader.execute_batch("COMMIT").expect("end the snapshot");
    drop(reader);
    db.json(&["renew", "r", "--owner", "w", "--ttl", "60"], 0);
    let (live, cut) = wal_frames(&db);
    assert!(
        live <= 1 && cut <= 1001,
        "the WAL grew to {length} frames and was cut to {cut} ({live} live)"
    );
}

#[test]
fn store_has_a_unique_constraint_on_resource() {
    let db = Db::sqlite();
    acquire(&db, "r1", "w1", "60");
    acquire(&db, "r2", "w2", "60");
    let conn = Connection::open(db.path()).expect("open");
    // A resource holds a set of tenures (lock modes), so UNIQUE(resource) lives in the table
    // with one row per resource that every grant writes: a unique index on exactly (resource).
    let mut unique_indexes = Vec::new();
    let mut stmt = conn
        .prepare("PRAGMA index_list(resources)")
        .expect("index_list");
    let mut rows = stmt.query([]).expect("index_list");
    while let Some(row) = rows.next().expect("row") {
        let name: String = row.get("name").expect("name");
        let unique: bool = row.get("unique").expect("unique");
        if unique {
            unique_indexes.push(name);
        }
    }
    let on_resource_only = unique_indexes.iter().any(|index| {
        let mut stmt = conn
            .prepare(&format!("PRAGMA index_info(\"{index}\")"))
            .expect("index_info");
        let columns: Vec<String> = stmt
            .query_map([], |r| r.get("name"))
            .expect("index_info")
            .collect::<Result<_, _>>()
            .expect("columns");
        columns == ["resource"]
    });
    assert!(
        on_resource_only,
        "no unique index on (resource); unique indexes: {unique_indexes:?}"
    );
    // And it bites: duplicating the rows fails, and nothing is duplicated.
    let err = conn
        .execute("INSERT INTO resources SELECT * FROM resources", [])
        .expect_err("a second row for a resource must be refused");
    assert_eq!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::ConstraintViolation),
        "{err}"
    );
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM resources", [], |r| r.get(0))
        .expect("count");
    assert_eq!(rows, 2);
    // The tenures themselves: one per owner and resource, each fence once.
    let err = conn
        .execute("INSERT INTO locks SELECT * FROM locks", [])
        .expect_err("a second tenure of an owner must be refused");
    assert_eq!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::ConstraintViolation),
        "{err}"
    );
}

#[test]
fn busy_database_is_waited_on() {
    let db = Db::sqlite();
    acquire(&db, "warm-up", "w1", "60");
    // Another process's write transaction holds the database for about a second.
    let conn = Connection::open(db.path()).expect("open");
    conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
    conn.execute("DELETE FROM locks WHERE resource = 'nothing'", [])
        .expect("write");
    let holder = std::thread::spawn(move || {
        sleep(Duration::from_secs(1));
        conn.execute_batch("COMMIT").expect("commit");
    });
    let mut child = spawn(&db, &["acquire", "r", "--owner", "w2", "--ttl", "60"]);
    sleep(Duration::from_millis(500));
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "acquire must wait for the busy database, not give up"
    );
    holder.join().expect("holder thread");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(lock_view(&parse_line(&out.stdout)["lock"]).owner, "w2");
}

// ---------------------------------------------------------------------------------------------
// Bad stores → 74

/// The SQLite sidecar files that may sit beside `path`.
fn siblings(path: &std::path::Path) -> Vec<std::path::PathBuf> {
    ["-wal", "-shm", "-journal"]
        .iter()
        .map(|suffix| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::path::PathBuf::from(name)
        })
        .filter(|p| p.exists())
        .collect()
}

/// The four lock commands, for stores that none of them may use.
const ALL_FOUR: [&[&str]; 4] = [
    &["acquire", "r", "--owner", "w1", "--ttl", "60"],
    &["status", "r"],
    &["release", "r", "--owner", "w1"],
    &["renew", "r", "--owner", "w1", "--ttl", "60"],
];

fn with_db(db: &str, args: &[&str]) -> Output {
    distlock_at(db).args(args).output().expect("run distlock")
}

#[test]
fn db_that_is_a_directory_is_a_store_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().to_str().expect("utf-8");
    for args in ALL_FOUR {
        assert_store_error(&with_db(path, args), &args);
    }
}

#[test]
fn garbage_file_is_a_store_error_and_left_unchanged() {
    let db = Db::sqlite();
    // 4096 pseudo-random bytes (xorshift), reproducible.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let garbage: Vec<u8> = (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect();
    std::fs::write(db.path(), &garbage).expect("write garbage");
    for args in ALL_FOUR {
        assert_store_error(&db.run(args), &args);
    }
    assert!(
        std::fs::read(db.path()).expect("read") == garbage,
        "the garbage file must be left byte for byte as it was"
    );
    assert_eq!(siblings(db.path()), Vec::<std::path::PathBuf>::new());
}

#[test]
fn unwritable_location_is_a_store_error() {
    for args in ALL_FOUR {
        let output = with_db("/proc/distlock-test/locks.db", args);
        if args[0] == "acquire" {
            assert_store_error(&output, &args);
        } else {
            // A store that does not exist holds nothing to read, release or renew: these answer
            // as for an empty one, and need not create it.
            assert_eq!(output.status.code(), Some(1), "{args:?}");
        }
    }
    assert!(!std::path::Path::new("/proc/distlock-test").exists());
}

#[test]
fn newer_schema_is_a_store_error() {
    let db = Db::sqlite();
    let held = acquire(&db, "r", "w1", "60");
    Connection::open(db.path())
        .expect("open")
        .pragma_update(None, "user_version", 99)
        .expect("user_version");
    for args in ALL_FOUR {
        let message = assert_store_error(&db.run(args), &args);
        assert!(message.contains("newer"), "{message:?} must say newer");
    }
    let conn = Connection::open(db.path()).expect("open");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("user_version");
    assert_eq!(version, 99, "the newer schema is left alone");
    let fence: i64 = conn
        .query_row("SELECT fence FROM locks WHERE resource = 'r'", [], |r| {
            r.get(0)
        })
        .expect("the lock row is still there");
    assert_eq!(fence, held.fence);
}

#[test]
fn missing_parent_folders_are_created() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("a/b/c/locks.db");
    let path = path.to_str().expect("utf-8");
    let out = with_db(path, &["acquire", "r", "--owner", "w1", "--ttl", "60"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(std::path::Path::new(path).is_file());
    let out = with_db(path, &["status", "r"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
}

/// The contract: the read-only commands on a SQLite store that does not exist answer as for an
/// empty store and create nothing — no folder, no database, no `-wal`/`-shm`/`-turnstile`.
/// (SQLite only: a PostgreSQL database either exists or the server says it does not.)
#[test]
fn read_only_commands_on_a_missing_store_answer_empty_and_create_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (path, first_missing) in [
        (
            dir.path().join("missing/folder/locks.db"),
            dir.path().join("missing"),
        ),
        (dir.path().join("locks.db"), dir.path().join("locks.db")),
    ] {
        let db = path.to_str().expect("utf-8 path");
        for (args, code, stdout) in [
            (
                &["status", "R"][..],
                1,
                "{\"held\":false,\"resource\":\"R\"}\n",
            ),
            (&["list"], 0, "{\"locks\":[]}\n"),
            (&["log"], 0, ""),
        ] {
            let out = with_db(db, args);
            assert_eq!(
                (out.status.code(), out.stdout.as_slice()),
                (Some(code), stdout.as_bytes()),
                "{args:?} on {db}: {}",
                describe(&out)
            );
        }
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read the temp dir")
            .map(|entry| entry.expect("an entry").file_name())
            .collect();
        assert!(
            !first_missing.exists() && left.is_empty(),
            "status, list and log on {db} must create nothing, left {left:?}"
        );
    }
}

#[test]
fn sqlite_file_of_another_application_is_refused_and_unchanged() {
    let db = Db::sqlite();
    {
        let conn = Connection::open(db.path()).expect("open");
        conn.execute_batch(
            "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);
             INSERT INTO notes (body) VALUES ('keep me');",
        )
        .expect("another application's schema");
    }
    let before = std::fs::read(db.path()).expect("read");
    for args in ALL_FOUR {
        assert_store_error(&db.run(args), &args);
    }
    assert!(
        std::fs::read(db.path()).expect("read") == before,
        "another application's database must be left byte for byte as it was"
    );
    assert_eq!(siblings(db.path()), Vec::<std::path::PathBuf>::new());
}

// ---------------------------------------------------------------------------------------------
// The default store location

fn without_db(env: &[(&str, &std::path::Path)], args: &[&str]) -> Output {
    let mut cmd = assert_cmd::Command::from_std(distlock());
    cmd.env_remove("XDG_STATE_HOME").env_remove("HOME");
    for (key, value) in env {
        cmd.env(key, value);
    }
    cmd.args(args).output().expect("run distlock")
}

#[test]
fn default_db_is_under_xdg_state_home() {
    let state = tempfile::tempdir().expect("temp dir");
    let home = tempfile::tempdir().expect("temp dir");
    let env = [("XDG_STATE_HOME", state.path()), ("HOME", home.path())];
    let out = without_db(&env, &["acquire", "r", "--owner", "w1", "--ttl", "60"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let path = state.path().join("distlock/locks.db");
    assert!(path.is_file(), "{} must exist", path.display());
    assert!(!home.path().join(".local").exists(), "HOME is not used");
    let out = with_db(path.to_str().expect("utf-8"), &["status", "r"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
}

#[test]
fn default_db_falls_back_to_home_local_state() {
    let home = tempfile::tempdir().expect("temp dir");
    let out = without_db(
        &[("HOME", home.path())],
        &["acquire", "r", "--owner", "w1", "--ttl", "60"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let path = home.path().join(".local/state/distlock/locks.db");
    assert!(path.is_file(), "{} must exist", path.display());
    let out = with_db(path.to_str().expect("utf-8"), &["status", "r"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
}

// ---------------------------------------------------------------------------------------------
// --format text

#[test]
fn text_format_prints_one_human_line_with_the_same_exit_codes() {
    each_store_and_server(|db| {
        let text = |args: &[&str], code: i32| {
            let mut all = vec!["--format", "text"];
            all.extend_from_slice(args);
            let out = db.run(&all);
            assert_eq!(out.status.code(), Some(code), "{all:?}: {}", describe(&out));
            let stdout = String::from_utf8(out.stdout).expect("utf-8");
            assert!(
                stdout.ends_with('\n') && stdout.lines().count() == 1,
                "{all:?}: one line, got {stdout:?}"
            );
            assert!(
                serde_json::from_str::<Value>(&stdout).is_err(),
                "{all:?}: a human line, not JSON: {stdout:?}"
            );
            assert!(stdout.contains("payment:42"), "{all:?}: {stdout:?}");
            assert!(out.stderr.is_empty(), "{all:?}: {:?}", out.stderr);
            stdout
        };
        let acquired = text(
            &["acquire", "payment:42", "--owner", "w1", "--ttl", "60"],
            0,
        );
        assert!(acquired.contains("w1"), "{acquired:?}");
        let busy = text(
            &["acquire", "payment:42", "--owner", "w2", "--ttl", "60"],
            75,
        );
        assert!(busy.contains("w1"), "the holder is named: {busy:?}");
        let held = text(&["status", "payment:42"], 0);
        assert!(held.contains("w1"), "{held:?}");
        text(&["renew", "payment:42", "--owner", "w1", "--ttl", "60"], 0);
        text(&["renew", "payment:42", "--owner", "w2", "--ttl", "60"], 77);
        text(&["release", "payment:42", "--owner", "w2"], 77);
        text(&["release", "payment:42", "--owner", "w1"], 0);
        text(&["release", "payment:42", "--owner", "w1"], 1);
        text(&["renew", "payment:42", "--owner", "w1", "--ttl", "60"], 1);
        text(&["status", "payment:42"], 1);
        // --format is global: it may follow the subcommand too.
        let out = db.run(&["status", "payment:42", "--format", "text"]);
        assert_eq!(out.status.code(), Some(1));
        assert!(serde_json::from_str::<Value>(&String::from_utf8_lossy(&out.stdout)).is_err());
    });
}
