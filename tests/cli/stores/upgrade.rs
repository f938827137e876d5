//! Schema upgrades: a store written by an earlier distlock — 0.1.0 (schema version 1), one
//! from before guarded tenures (version 2), before server tokens (version 3) or before the
//! operator's token of a break was recorded (version 4) — is upgraded in place, atomically, by
//! the first newer distlock that writes to it, keeping every live lock, fence, place in the
//! queue and history row; a store newer than the binary is refused (74), naming both versions.
//!
//! On SQLite the old stores are `tests/fixtures/v1.db` to `v4.db`, each made by that distlock
//! itself (see the fixtures' README), copied per test. On PostgreSQL they are made here as those
//! versions made them: their schema, verbatim ([`PG_V1_SCHEMA`], [`PG_V2_UPGRADE`],
//! [`PG_V3_V4_UPGRADE`]), holding the fixture's rows, written with plain SQL. Either way the fixture's 365-day leases are moved
//! forward in the copy (the store keeps its version), so they are live whenever the test runs;
//! the fixtures' 1-second leases stay expired.
//!
//! A brand-new store is created at the newest version, however many processes arrive at once:
//! `processes_arriving_together_on_a_brand_new_store_all_succeed`.

use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use rusqlite::Connection;
use serde_json::{Value, json};

use crate::common::contention::Contention;
use crate::common::files::read_trimmed;
use crate::common::output::{assert_store_error, now_millis, parse_line, rfc3339_millis};
use crate::common::process::{Proc, describe};
use crate::common::server::{Server, lock_path};
use crate::common::store::{Db, Kind, assert_free, assert_held_by, each_store, run_cmd, sh_script};
use crate::common::tenure::{Mode, Tenure};
use crate::server::tokens::{call, make_token};

/// The schema distlock 0.1.0 created on PostgreSQL (schema version 1): the `SCHEMA` constant
/// of `src/store/postgres.rs` at commit 2eedc64, verbatim.
const PG_V1_SCHEMA: &str = "
CREATE SCHEMA IF NOT EXISTS distlock;
CREATE TABLE IF NOT EXISTS distlock.locks (
    resource    text        NOT NULL PRIMARY KEY,   -- UNIQUE(resource): one row per resource
    owner       text        NOT NULL,
    fence       bigint      NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL                -- live while now() < expires_at
);
CREATE SEQUENCE IF NOT EXISTS distlock.fence AS bigint NO CYCLE;
CREATE TABLE IF NOT EXISTS distlock.history (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at             timestamptz NOT NULL,
    resource       text        NOT NULL,
    owner          text        NOT NULL,
    fence          bigint      NOT NULL,
    event          text        NOT NULL,
    previous_owner text
);
CREATE INDEX IF NOT EXISTS history_by_resource ON distlock.history (resource, id);
CREATE TABLE IF NOT EXISTS distlock.meta (schema_version integer NOT NULL);
INSERT INTO distlock.meta (schema_version)
    SELECT 1 WHERE NOT EXISTS (SELECT FROM distlock.meta);
";

/// What distlock at ed5b114 added to [`PG_V1_SCHEMA`] to make schema version 2: `UPGRADE_V2`
/// of `src/store/postgres/sql.rs` at that commit, verbatim.
const PG_V2_UPGRADE: &str = "
CREATE TABLE distlock.resources (
    resource text NOT NULL PRIMARY KEY                  -- UNIQUE(resource)
);
INSERT INTO distlock.resources (resource) SELECT DISTINCT resource FROM distlock.locks;
ALTER TABLE distlock.locks DROP CONSTRAINT locks_pkey;
ALTER TABLE distlock.locks
    ADD COLUMN mode text NOT NULL DEFAULT 'exclusive',  -- exclusive | shared | semaphore
    ADD COLUMN lim integer,                             -- a semaphore's N
    ADD COLUMN note text,
    ADD PRIMARY KEY (resource, fence),
    ADD UNIQUE (resource, owner);                       -- one tenure per owner and resource
ALTER TABLE distlock.history
    ADD COLUMN mode text NOT NULL DEFAULT 'exclusive',
    ADD COLUMN lim integer,
    ADD COLUMN note text,
    ADD COLUMN operator text,                           -- who broke the lock
    ADD COLUMN reason text;                             -- why
CREATE TABLE distlock.waiters (
    ticket     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- arrival order
    resource   text        NOT NULL,
    owner      text        NOT NULL,
    expires_at timestamptz NOT NULL,                    -- a live place while now() < expires_at
    UNIQUE (resource, owner)
);
UPDATE distlock.meta SET schema_version = 2;
";

/// The schema version of this build.
const NEW_VERSION: i64 = 5;

/// Query parameter `$N`, a time in milliseconds, as a `timestamptz`, exactly (integer
/// arithmetic).
fn pg_time(n: u8) -> String {
    format!("('epoch'::timestamptz + ${n}::bigint * interval '1 ms')")
}

/// The fixture's live leases (365 days) are longer than this; its expired one (1 s) is not.
const DAY_MS: i64 = 86_400_000;

/// The fixture's `fence_counter`: the last fence 0.1.0 handed out.
const V1_LAST_FENCE: i64 = 6;

/// A row of the fixture's `locks`, times in milliseconds.
struct LockRow {
    resource: String,
    owner: String,
    fence: i64,
    acquired_at: i64,
    expires_at: i64,
}

impl LockRow {
    /// The tenure the new binary must show for this row (0.1.0's locks are all exclusive).
    fn tenure(&self) -> Tenure {
        Tenure {
            resource: self.resource.clone(),
            owner: self.owner.clone(),
            fence: self.fence,
            acquired_at: rfc3339_millis(self.acquired_at),
            expires_at: rfc3339_millis(self.expires_at),
            mode: Mode::Exclusive,
        }
    }
}

/// A row of the fixture's `history`, in commit order.
struct EventRow {
    at: i64,
    resource: String,
    owner: String,
    fence: i64,
    event: String,
    previous_owner: Option<String>,
}

impl EventRow {
    /// The event as `log` must print it.
    fn json(&self) -> Value {
        let mut event = json!({
            "at": rfc3339_millis(self.at),
            "resource": self.resource,
            "owner": self.owner,
            "fence": self.fence,
            "event": self.event,
        });
        if let Some(previous) = &self.previous_owner {
            event["previous_owner"] = json!(previous);
        }
        event
    }
}

/// What the old store holds.
struct V1 {
    locks: Vec<LockRow>,
    history: Vec<EventRow>,
}

impl V1 {
    /// The rows whose lease runs now.
    fn live(&self) -> impl Iterator<Item = &LockRow> {
        let now = now_millis();
        self.locks.iter().filter(move |l| l.expires_at > now)
    }
}

/// Copies the fixture to `path`, moves its long leases forward (a plain UPDATE: the file stays
/// version 1), and reads its rows.
fn v1_sqlite_copy(path: &Path) -> V1 {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1.db");
    fs::copy(&fixture, path).expect("copy the v1 fixture");
    let conn = Connection::open(path).expect("open the copy");
    conn.execute(
        "UPDATE locks SET expires_at = max(expires_at, ?1) WHERE expires_at - acquired_at > ?2",
        [now_millis() + DAY_MS, DAY_MS],
    )
    .expect("move the live leases forward");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("user_version");
    assert_eq!(version, 1, "the copy is still a version 1 store");
    let last: i64 = conn
        .query_row("SELECT last FROM fence_counter", [], |r| r.get(0))
        .expect("fence counter");
    assert_eq!(last, V1_LAST_FENCE, "the fixture's fence counter");
    let locks = conn
        .prepare(
            "SELECT resource, owner, fence, acquired_at, expires_at FROM locks ORDER BY resource",
        )
        .expect("prepare")
        .query_map([], |r| {
            Ok(LockRow {
                resource: r.get(0)?,
                owner: r.get(1)?,
                fence: r.get(2)?,
                acquired_at: r.get(3)?,
                expires_at: r.get(4)?,
            })
        })
        .expect("locks")
        .collect::<Result<Vec<_>, _>>()
        .expect("lock rows");
    let history = conn
        .prepare(
            "SELECT at, resource, owner, fence, event, previous_owner FROM history ORDER BY id",
        )
        .expect("prepare")
        .query_map([], |r| {
            Ok(EventRow {
                at: r.get(0)?,
                resource: r.get(1)?,
                owner: r.get(2)?,
                fence: r.get(3)?,
                event: r.get(4)?,
                previous_owner: r.get(5)?,
            })
        })
        .expect("history")
        .collect::<Result<Vec<_>, _>>()
        .expect("history rows");
    V1 { locks, history }
}

/// Makes `db` a version 1 store holding the fixture's rows (live leases moved forward): on
/// SQLite the fixture itself; on PostgreSQL 0.1.0's schema, filled with plain SQL.
fn install_v1(db: &Db) -> V1 {
    match db.kind {
        Kind::Sqlite => v1_sqlite_copy(db.path()),
        Kind::Postgres => {
            let v1 = v1_sqlite_copy(&db.file("v1.db"));
            let mut client = db.pg_client();
            let mut tx = client.transaction().expect("begin");
            tx.batch_execute(PG_V1_SCHEMA).expect("0.1.0's schema");
            for lock in &v1.locks {
                tx.execute(
                    &format!(
                        "INSERT INTO distlock.locks (resource, owner, fence, acquired_at, expires_at)
                         VALUES ($1, $2, $3, {}, {})",
                        pg_time(4),
                        pg_time(5)
                    ),
                    &[&lock.resource, &lock.owner, &lock.fence, &lock.acquired_at, &lock.expires_at],
                )
                .expect("insert a lock row");
            }
            for event in &v1.history {
                tx.execute(
                    &format!(
                        "INSERT INTO distlock.history (at, resource, owner, fence, event, previous_owner)
                         VALUES ({}, $2, $3, $4, $5, $6)",
                        pg_time(1)
                    ),
                    &[
                        &event.at,
                        &event.resource,
                        &event.owner,
                        &event.fence,
                        &event.event,
                        &event.previous_owner,
                    ],
                )
                .expect("insert a history row");
            }
            tx.execute("SELECT setval('distlock.fence', $1)", &[&V1_LAST_FENCE])
                .expect("the fence sequence");
            tx.commit().expect("commit the v1 store");
            assert_eq!(schema_version(db), 1, "0.1.0's schema is version 1");
            v1
        }
    }
}

/// The store's schema version: `PRAGMA user_version` on SQLite, `distlock.meta` on PostgreSQL.
fn schema_version(db: &Db) -> i64 {
    match db.kind {
        Kind::Sqlite => Connection::open(db.path())
            .expect("open the store")
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .expect("user_version"),
        Kind::Postgres => i64::from(
            db.pg_client()
                .query_one("SELECT schema_version FROM distlock.meta", &[])
                .expect("meta")
                .get::<_, i32>(0),
        ),
    }
}

fn set_schema_version(db: &Db, version: i32) {
    match db.kind {
        Kind::Sqlite => Connection::open(db.path())
            .expect("open the store")
            .pragma_update(None, "user_version", version)
            .expect("set user_version"),
        Kind::Postgres => {
            db.pg_client()
                .execute("UPDATE distlock.meta SET schema_version = $1", &[&version])
                .expect("set the schema version");
        }
    }
}

/// On SQLite, `PRAGMA integrity_check` must say `ok`.
fn assert_sound(db: &Db) {
    if db.kind == Kind::Sqlite {
        let check: String = Connection::open(db.path())
            .expect("open the store")
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .expect("integrity_check");
        assert_eq!(check, "ok", "integrity_check");
    }
}

/// Everything in the store, to check that a command left it untouched: the SQLite file's bytes
/// (their length and FNV-1a hash), or every row of every table and sequence in PostgreSQL's
/// `distlock` schema.
fn snapshot(db: &Db) -> Vec<String> {
    match db.kind {
        Kind::Sqlite => {
            let bytes = fs::read(db.path()).expect("read the store");
            let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, &b| {
                (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            vec![format!("{} bytes, FNV-1a {hash:016x}", bytes.len())]
        }
        Kind::Postgres => {
            let mut client = db.pg_client();
            let tables: Vec<String> = client
                .query(
                    "SELECT table_name::text FROM information_schema.tables
                     WHERE table_schema = 'distlock' ORDER BY 1",
                    &[],
                )
                .expect("tables")
                .iter()
                .map(|r| r.get(0))
                .collect();
            let mut rows: Vec<String> = tables
                .iter()
                .map(|table| {
                    let sql = format!(
                        "SELECT coalesce(json_agg(t ORDER BY t::text), '[]')::text FROM distlock.\"{table}\" t"
                    );
                    let rows: String = client.query_one(&sql, &[]).expect("rows").get(0);
                    format!("{table}: {rows}")
                })
                .collect();
            for row in client
                .query(
                    "SELECT sequencename::text || ' ' || coalesce(last_value::text, '-')
                     FROM pg_sequences WHERE schemaname = 'distlock' ORDER BY 1",
                    &[],
                )
                .expect("sequences")
            {
                rows.push(row.get(0));
            }
            rows
        }
    }
}

/// The numbers a message names, leaving out those in the store's own name (a path or URL).
fn numbers_named(message: &str, db: &Db) -> Vec<String> {
    let mut text = message.replace(&db.url, " ");
    if db.kind == Kind::Postgres {
        let (base, _) = db.url.split_once('?').unwrap_or((&db.url, ""));
        let (rest, name) = base.rsplit_once('/').expect("a database name");
        let server = rest.rsplit_once('@').map_or(rest, |(_, server)| server);
        text = text.replace(name, " ").replace(server, " ");
    }
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit()))
        .map(str::to_owned)
        .collect()
}

/// Every old row the new binary must still show: the live locks (byte for byte, as 0.1.0
/// printed them), the expired one as not held, and the old history first, in order.
fn assert_old_rows_kept(db: &Db, v1: &V1) {
    let live: Vec<&LockRow> = v1.live().collect();
    assert_eq!(
        live.iter().map(|l| l.resource.as_str()).collect::<Vec<_>>(),
        ["deploy", "expired", "payment:42"],
        "the fixture's live locks"
    );
    for lock in live {
        let out = db.run(&["status", &lock.resource]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!(
                "{{\"held\":true,\"lock\":{}}}\n",
                lock.tenure().plain_lock_text()
            ),
            "status {}: {}",
            lock.resource,
            describe(&out)
        );
    }
    assert_eq!(
        db.status("stale"),
        (1, json!({"held": false, "resource": "stale"})),
        "the fixture's expired lock"
    );
    let log = db.log(&[]);
    let old: Vec<Value> = v1.history.iter().map(EventRow::json).collect();
    assert_eq!(old.len(), 9, "the fixture's history");
    assert!(log.len() >= old.len(), "log: {log:?}");
    assert_eq!(
        log[..old.len()],
        old[..],
        "the old history, first and in order"
    );
}

/// `acquire RESOURCE --owner OWNER --ttl 60`, which must be granted; returns its fence.
fn acquire_fence(db: &Db, resource: &str, owner: &str) -> i64 {
    let answer = db.json(&["acquire", resource, "--owner", owner, "--ttl", "60"], 0);
    Tenure::read(&answer["lock"], Mode::Exclusive).fence
}

#[test]
fn v1_store_is_upgraded_in_place_keeping_locks_fences_and_history() {
    each_store(|db| {
        let v1 = install_v1(db);
        let fence = acquire_fence(db, "other", "x");
        assert!(
            fence > V1_LAST_FENCE,
            "a fence after 0.1.0's last ({V1_LAST_FENCE}): {fence}"
        );
        assert_eq!(schema_version(db), NEW_VERSION, "{:?}: upgraded", db.kind);
        assert_sound(db);
        assert_old_rows_kept(db, &v1);
        let log = db.log(&[]);
        assert_eq!(log.len(), 10, "the old history and one new event: {log:?}");
        assert_eq!(
            (&log[9]["resource"], &log[9]["fence"], &log[9]["event"]),
            (&json!("other"), &json!(fence), &json!("acquired"))
        );

        // The old locks are tenures like any other: busy for others, released by their owner.
        let deploy = v1.live().find(|l| l.resource == "deploy").expect("deploy");
        assert_eq!(
            db.json(&["acquire", "deploy", "--owner", "z", "--ttl", "60"], 75),
            json!({"acquired": false, "resource": "deploy", "holder": deploy.tenure().holder()})
        );
        db.json(&["release", "deploy", "--owner", "alice"], 0);
        // Fences keep counting from the old counter, over released and expired resources too.
        let mut last = fence;
        for resource in ["deploy", "gone", "stale"] {
            let next = acquire_fence(db, resource, "y");
            assert!(next > last, "{resource}: fence {next} after {last}");
            last = next;
        }
        assert_eq!(schema_version(db), NEW_VERSION);
        assert_sound(db);
    });
}

/// Eight processes that each acquire a resource of their own, let go at one instant: each must
/// be granted, with a fence of its own after `last_fence`. Returns how many there were.
fn acquire_all_at_once(db: &Db, last_fence: i64) -> usize {
    let owners: Vec<String> = (0..8).map(|i| format!("p{i}")).collect();
    let contention = Contention {
        dir: db.dir.path(),
        name: "opener",
        workers: owners.len(),
        rounds: 1,
        bound: Duration::from_secs(60),
    };
    let contended = contention.run(|worker, _| {
        let owner = &owners[worker];
        let mut cmd = db.std_cmd();
        cmd.args(["acquire", &format!("new-{owner}"), "--owner", owner])
            .args(["--ttl", "60"]);
        cmd
    });
    let mut fences = Vec::new();
    for end in contended.ends {
        let (owner, finished) = (&owners[end.worker], end.finished);
        assert_eq!(finished.code(), Some(0), "{owner}: {}", finished.describe());
        let lock = parse_line(&finished.output.stdout)["lock"].clone();
        let tenure = Tenure::read(&lock, Mode::Exclusive);
        assert!(tenure.fence > last_fence, "{owner}: fence {}", tenure.fence);
        assert_eq!(
            db.json(&["status", &tenure.resource], 0),
            json!({"held": true, "lock": tenure.lock()}),
            "{owner}'s new lock"
        );
        fences.push(tenure.fence);
    }
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), owners.len(), "a fence each");
    owners.len()
}

#[test]
fn many_processes_opening_one_v1_store_at_once_all_succeed_and_it_is_upgraded_once() {
    each_store(|db| {
        let v1 = install_v1(db);
        let processes = acquire_all_at_once(db, V1_LAST_FENCE);
        assert_eq!(schema_version(db), NEW_VERSION, "{:?}: upgraded", db.kind);
        assert_sound(db);
        assert_old_rows_kept(db, &v1);
        assert_eq!(
            db.log(&[]).len(),
            9 + processes,
            "old history and one event each"
        );
    });
}

#[test]
fn store_newer_than_the_binary_is_refused_naming_both_versions() {
    each_store(|db| {
        install_v1(db);
        acquire_fence(db, "other", "x");
        assert_eq!(schema_version(db), NEW_VERSION, "{:?}: upgraded", db.kind);
        set_schema_version(db, 99);
        let before = snapshot(db);
        let commands: [&[&str]; 5] = [
            &["status", "deploy"],
            &["acquire", "deploy", "--owner", "z", "--ttl", "60"],
            &["release", "other", "--owner", "x"],
            &["list"],
            &["log"],
        ];
        for args in commands {
            let line = assert_store_error(&db.run(args), &args);
            let numbers = numbers_named(&line, db);
            assert!(
                numbers.iter().any(|n| n == "99")
                    && numbers.iter().any(|n| *n == NEW_VERSION.to_string()),
                "{args:?}: the message names the store's version (99) and this binary's \
                 ({NEW_VERSION}): {line:?}"
            );
        }
        let out = db
            .std_cmd()
            .args(sh_script(
                &["run", "--resource", "r"],
                r#"echo ran > "$D/ran""#,
                &[],
            ))
            .env("D", db.dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("run distlock");
        assert_store_error(&out, &"run on a newer store");
        assert!(
            !db.file("ran").exists(),
            "run started its command on a newer store"
        );
        assert_eq!(
            snapshot(db),
            before,
            "{:?}: a newer store is left untouched",
            db.kind
        );
        assert_eq!(schema_version(db), 99);
    });
}

#[test]
fn processes_arriving_together_on_a_brand_new_store_all_succeed() {
    // Arrivals some milliseconds apart, not at one instant: a process that found no schema
    // must still find it made when its turn to create it comes. One round per spacing, each on
    // a new store.
    for gap_ms in [0, 2, 5, 10, 20, 40] {
        each_store(|db| {
            let procs: Vec<Proc> = (0..8)
                .map(|i| {
                    let owner = format!("p{i}");
                    let mut cmd = db.std_cmd();
                    cmd.args([
                        "acquire",
                        &format!("r{i}"),
                        "--owner",
                        &owner,
                        "--ttl",
                        "60",
                    ]);
                    let proc = Proc::spawn(&mut cmd, db.dir.path(), &owner);
                    std::thread::sleep(Duration::from_millis(gap_ms));
                    proc
                })
                .collect();
            for proc in procs {
                let finished = proc.finish(Duration::from_secs(60));
                assert_eq!(finished.code(), Some(0), "{}", finished.describe());
            }
            assert_eq!(
                schema_version(db),
                NEW_VERSION,
                "{:?}: a new store",
                db.kind
            );
            assert_sound(db);
            let list = db.json(&["list"], 0);
            assert_eq!(list["locks"].as_array().map(Vec::len), Some(8), "{list}");
        });
    }
}

// ---------------------------------------------------------------------------------------------
// From schema version 2 (lock modes, before guarded tenures)
// ---------------------------------------------------------------------------------------------

/// The v2 fixture's `fence_counter`: the last fence that distlock handed out there.
const V2_LAST_FENCE: i64 = 9;

/// A row of the v2 fixture's `locks`, times in milliseconds.
struct V2Lock {
    resource: String,
    owner: String,
    fence: i64,
    acquired_at: i64,
    expires_at: i64,
    mode: String,
    lim: Option<i64>,
    note: Option<String>,
}

impl V2Lock {
    /// The lock object the new binary must show for this row.
    fn lock(&self) -> Value {
        let mut lock = json!({
            "resource": self.resource,
            "owner": self.owner,
            "fence": self.fence,
            "acquired_at": rfc3339_millis(self.acquired_at),
            "expires_at": rfc3339_millis(self.expires_at),
        });
        match (self.mode.as_str(), self.lim) {
            ("exclusive", None) => {}
            ("shared", None) => lock["shared"] = json!(true),
            ("semaphore", Some(n)) => lock["limit"] = json!(n),
            other => panic!("the fixture holds an unexpected mode {other:?}"),
        }
        if let Some(note) = &self.note {
            lock["note"] = json!(note);
        }
        lock
    }
}

/// A row of the v2 fixture's `history`, in commit order, every column.
struct V2Event {
    at: i64,
    resource: String,
    owner: String,
    fence: i64,
    event: String,
    previous_owner: Option<String>,
    mode: String,
    lim: Option<i64>,
    note: Option<String>,
    operator: Option<String>,
    reason: Option<String>,
}

/// What the v2 store holds. `log` is what distlock at ed5b114 printed for it
/// (`tests/fixtures/v2.log`): history times are never moved, so it stays true of every copy.
struct V2 {
    resources: Vec<String>,
    locks: Vec<V2Lock>,
    history: Vec<V2Event>,
    /// Places in the queue: (resource, owner, expires_at), all long expired.
    waiters: Vec<(String, String, i64)>,
    log: String,
}

impl V2 {
    /// The lock objects of the rows whose lease runs now, by resource and fence (as `list`).
    fn live(&self) -> Vec<Value> {
        let now = now_millis();
        let mut live: Vec<&V2Lock> = self.locks.iter().filter(|l| l.expires_at > now).collect();
        live.sort_by(|a, b| (&a.resource, a.fence).cmp(&(&b.resource, b.fence)));
        live.into_iter().map(V2Lock::lock).collect()
    }

    /// The live row of `resource` held by `owner`.
    fn tenure(&self, resource: &str, owner: &str) -> &V2Lock {
        self.locks
            .iter()
            .find(|l| l.resource == resource && l.owner == owner)
            .unwrap_or_else(|| panic!("the fixture's tenure of {owner} on {resource}"))
    }
}

/// Copies the v2 fixture to `path`, moves its long leases forward (a plain UPDATE: the file
/// stays version 2), and reads its rows.
fn v2_sqlite_copy(path: &Path) -> V2 {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    fs::copy(fixtures.join("v2.db"), path).expect("copy the v2 fixture");
    let log = fs::read_to_string(fixtures.join("v2.log")).expect("read the v2 fixture's log");
    let conn = Connection::open(path).expect("open the copy");
    conn.execute(
        "UPDATE locks SET expires_at = max(expires_at, ?1) WHERE expires_at - acquired_at > ?2",
        [now_millis() + DAY_MS, DAY_MS],
    )
    .expect("move the live leases forward");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("user_version");
    assert_eq!(version, 2, "the copy is still a version 2 store");
    let last: i64 = conn
        .query_row("SELECT last FROM fence_counter", [], |r| r.get(0))
        .expect("fence counter");
    assert_eq!(last, V2_LAST_FENCE, "the fixture's fence counter");
    let resources = conn
        .prepare("SELECT resource FROM resources ORDER BY resource")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("resources")
        .collect::<Result<Vec<String>, _>>()
        .expect("resource rows");
    let locks = conn
        .prepare(
            "SELECT resource, owner, fence, acquired_at, expires_at, mode, lim, note FROM locks
             ORDER BY resource, fence",
        )
        .expect("prepare")
        .query_map([], |r| {
            Ok(V2Lock {
                resource: r.get(0)?,
                owner: r.get(1)?,
                fence: r.get(2)?,
                acquired_at: r.get(3)?,
                expires_at: r.get(4)?,
                mode: r.get(5)?,
                lim: r.get(6)?,
                note: r.get(7)?,
            })
        })
        .expect("locks")
        .collect::<Result<Vec<_>, _>>()
        .expect("lock rows");
    let history = conn
        .prepare(
            "SELECT at, resource, owner, fence, event, previous_owner, mode, lim, note, operator,
                    reason FROM history ORDER BY id",
        )
        .expect("prepare")
        .query_map([], |r| {
            Ok(V2Event {
                at: r.get(0)?,
                resource: r.get(1)?,
                owner: r.get(2)?,
                fence: r.get(3)?,
                event: r.get(4)?,
                previous_owner: r.get(5)?,
                mode: r.get(6)?,
                lim: r.get(7)?,
                note: r.get(8)?,
                operator: r.get(9)?,
                reason: r.get(10)?,
            })
        })
        .expect("history")
        .collect::<Result<Vec<_>, _>>()
        .expect("history rows");
    let waiters = conn
        .prepare("SELECT resource, owner, expires_at FROM waiters ORDER BY ticket")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("waiters")
        .collect::<Result<Vec<_>, _>>()
        .expect("waiter rows");
    V2 {
        resources,
        locks,
        history,
        waiters,
        log,
    }
}

/// A semaphore's N as PostgreSQL's `integer`.
fn pg_lim(lim: Option<i64>) -> Option<i32> {
    lim.map(|n| i32::try_from(n).expect("a semaphore's N fits an integer"))
}

/// Makes `db` a version 2 store holding the v2 fixture's rows (live leases moved forward): on
/// SQLite the fixture itself; on PostgreSQL the version 2 schema, filled with plain SQL.
fn install_v2(db: &Db) -> V2 {
    match db.kind {
        Kind::Sqlite => v2_sqlite_copy(db.path()),
        Kind::Postgres => {
            let v2 = v2_sqlite_copy(&db.file("v2.db"));
            let mut client = db.pg_client();
            let mut tx = client.transaction().expect("begin");
            tx.batch_execute(PG_V1_SCHEMA).expect("0.1.0's schema");
            tx.batch_execute(PG_V2_UPGRADE)
                .expect("the version 2 schema");
            for resource in &v2.resources {
                tx.execute(
                    "INSERT INTO distlock.resources (resource) VALUES ($1)",
                    &[resource],
                )
                .expect("insert a resource row");
            }
            for lock in &v2.locks {
                tx.execute(
                    &format!(
                        "INSERT INTO distlock.locks
                             (resource, owner, fence, acquired_at, expires_at, mode, lim, note)
                         VALUES ($1, $2, $3, {}, {}, $6, $7, $8)",
                        pg_time(4),
                        pg_time(5)
                    ),
                    &[
                        &lock.resource,
                        &lock.owner,
                        &lock.fence,
                        &lock.acquired_at,
                        &lock.expires_at,
                        &lock.mode,
                        &pg_lim(lock.lim),
                        &lock.note,
                    ],
                )
                .expect("insert a lock row");
            }
            for event in &v2.history {
                tx.execute(
                    &format!(
                        "INSERT INTO distlock.history (at, resource, owner, fence, event,
                             previous_owner, mode, lim, note, operator, reason)
                         VALUES ({}, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                        pg_time(1)
                    ),
                    &[
                        &event.at,
                        &event.resource,
                        &event.owner,
                        &event.fence,
                        &event.event,
                        &event.previous_owner,
                        &event.mode,
                        &pg_lim(event.lim),
                        &event.note,
                        &event.operator,
                        &event.reason,
                    ],
                )
                .expect("insert a history row");
            }
            for (resource, owner, expires_at) in &v2.waiters {
                tx.execute(
                    &format!(
                        "INSERT INTO distlock.waiters (resource, owner, expires_at)
                         VALUES ($1, $2, {})",
                        pg_time(3)
                    ),
                    &[resource, owner, expires_at],
                )
                .expect("insert a waiter row");
            }
            tx.execute("SELECT setval('distlock.fence', $1)", &[&V2_LAST_FENCE])
                .expect("the fence sequence");
            tx.commit().expect("commit the v2 store");
            assert_eq!(schema_version(db), 2, "the version 2 schema");
            v2
        }
    }
}

/// Every old row the new binary must still show: the live tenures in every mode, with their
/// notes, the expired one as not held, and the old history first, in order, byte for byte as
/// distlock at ed5b114 printed it.
fn assert_v2_rows_kept(db: &Db, v2: &V2) {
    let live = v2.live();
    let resources: Vec<&str> = live
        .iter()
        .map(|l| l["resource"].as_str().expect("resource"))
        .collect();
    assert_eq!(
        resources,
        ["deploy", "report", "reports", "reports", "slots", "slots"],
        "the fixture's live tenures"
    );
    let listed = db.json(&["list"], 0);
    let old: Vec<&Value> = listed["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .filter(|l| resources.contains(&l["resource"].as_str().expect("resource")))
        .collect();
    assert_eq!(old, live.iter().collect::<Vec<_>>(), "list: {listed}");
    assert_eq!(
        db.status("stale"),
        (1, json!({"held": false, "resource": "stale"})),
        "the fixture's expired lock"
    );
    let log = db.run(&["log"]);
    let log = String::from_utf8_lossy(&log.stdout);
    assert_eq!(v2.log.lines().count(), 14, "the fixture's history");
    assert!(
        log.starts_with(&v2.log),
        "the old history, first, in order and byte for byte:\n{log}"
    );
}

#[test]
fn v2_store_is_upgraded_in_place_keeping_tenures_fences_history_and_the_queue() {
    each_store(|db| {
        let v2 = install_v2(db);
        let fence = acquire_fence(db, "other", "x");
        assert!(
            fence > V2_LAST_FENCE,
            "a fence after the old store's last ({V2_LAST_FENCE}): {fence}"
        );
        assert_eq!(schema_version(db), NEW_VERSION, "{:?}: upgraded", db.kind);
        assert_sound(db);
        assert_v2_rows_kept(db, &v2);

        // Every tenure from before the upgrade may be joined — also the one `run` took (with
        // `--hold-at-least`): the old store does not say who took a tenure.
        let report = v2.tenure("report", "cron");
        let joined = db.json(&["acquire", "report", "--owner", "cron", "--ttl", "60"], 0);
        assert_eq!(joined["lock"]["fence"], report.fence, "{joined}");
        let alice = v2.tenure("deploy", "alice");
        let out = run_cmd(
            db,
            &["--resource", "deploy", "--owner", "alice", "--", "true"],
        )
        .output()
        .expect("run distlock");
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let lock = assert_held_by(db, "deploy", "alice");
        assert_eq!(lock["fence"], alice.fence, "joined: {lock}");
        assert_eq!(lock["note"], "deploy v1.4 by alice", "{lock}");

        // The old tenures are tenures like any other, in their own modes.
        let mut last = fence;
        let mut granted = |args: &[&str]| {
            let answer = db.json(args, 0);
            let next = answer["lock"]["fence"].as_i64().expect("fence");
            assert!(next > last, "{args:?}: fence {next} after {last}");
            last = next;
        };
        granted(&[
            "acquire", "reports", "--owner", "r3", "--shared", "--ttl", "60",
        ]);
        let busy = db.json(&["acquire", "reports", "--owner", "w", "--ttl", "60"], 75);
        assert_eq!(busy["holders"].as_array().map(Vec::len), Some(3), "{busy}");
        granted(&[
            "acquire", "slots", "--owner", "s3", "--limit", "3", "--ttl", "60",
        ]);
        db.json(
            &[
                "acquire", "slots", "--owner", "s4", "--limit", "3", "--ttl", "60",
            ],
            75,
        );
        // The dead waiter's place reserves nothing.
        assert_eq!(v2.waiters.len(), 1, "the fixture's dead waiter");
        assert_eq!(db.waiting("deploy"), 0);
        db.json(&["release", "deploy", "--owner", "alice"], 0);
        granted(&["acquire", "deploy", "--owner", "z", "--ttl", "60"]);
        for resource in ["gone", "stale", "broken"] {
            granted(&["acquire", resource, "--owner", "y", "--ttl", "60"]);
        }

        // A tenure run takes on the upgraded store is guarded: its own owner finds it busy.
        let out = run_cmd(
            db,
            &sh_script(
                &["--resource", "fresh", "--owner", "cron"],
                r#""$DL" acquire fresh --owner cron --ttl 60 > /dev/null; echo $? > "$D/inner""#,
                &[],
            ),
        )
        .output()
        .expect("run distlock");
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert_eq!(read_trimmed(&db.file("inner")), "75", "acquire inside run");
        assert_free(db, "fresh");
        assert_eq!(schema_version(db), NEW_VERSION);
        assert_sound(db);
    });
}

#[test]
fn many_processes_opening_one_v2_store_at_once_all_succeed_and_it_is_upgraded_once() {
    each_store(|db| {
        let v2 = install_v2(db);
        let processes = acquire_all_at_once(db, V2_LAST_FENCE);
        assert_eq!(schema_version(db), NEW_VERSION, "{:?}: upgraded", db.kind);
        assert_sound(db);
        assert_v2_rows_kept(db, &v2);
        assert_eq!(
            db.log(&[]).len(),
            v2.history.len() + processes,
            "old history and one event each"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// From schema version 3 (guarded tenures, before server tokens)
// ---------------------------------------------------------------------------------------------

#[test]
fn v3_store_is_upgraded_keeping_guarded_tenures_and_every_place_in_the_queue() {
    let db = Db::sqlite();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    fs::copy(fixtures.join("v3.db"), db.path()).expect("copy the v3 fixture");
    let old_log = fs::read_to_string(fixtures.join("v3.log")).expect("read the v3 fixture's log");
    {
        // Every lease and the dead waiter's place run for a day from now (the file stays v3).
        let conn = Connection::open(db.path()).expect("open the copy");
        let later = now_millis() + DAY_MS;
        conn.execute("UPDATE locks SET expires_at = ?1", [later])
            .expect("move the leases forward");
        conn.execute("UPDATE waiters SET expires_at = ?1", [later])
            .expect("make the place live");
    }
    // Reading does not upgrade.
    assert_held_by(&db, "deploy", "alice");
    assert_eq!(schema_version(&db), 3, "a read left the schema as it was");
    // The first write upgrades, and the waiter's place is still first in line: with the holder
    // gone, a newcomer is still busy behind it.
    db.json(&["release", "deploy", "--owner", "alice"], 0);
    assert_eq!(schema_version(&db), NEW_VERSION, "upgraded");
    assert_sound(&db);
    assert_eq!(db.waiting("deploy"), 1, "the place in the queue was kept");
    let busy = db.json(
        &["acquire", "deploy", "--owner", "carol", "--ttl", "60"],
        75,
    );
    assert_eq!(busy["waiting"], 1, "{busy}");
    let granted = db.json(
        &[
            "acquire", "deploy", "--owner", "bob", "--ttl", "60", "--wait", "5",
        ],
        0,
    );
    assert!(
        granted["lock"]["fence"].as_i64().expect("fence") > 6,
        "a fence after the old store's last: {granted}"
    );
    // The tenure `run` took and kept is still guarded: its own owner cannot join it.
    db.json(&["acquire", "kept", "--owner", "cron", "--ttl", "60"], 75);
    let joined = db.json(
        &[
            "acquire", "reports", "--owner", "r1", "--shared", "--ttl", "60",
        ],
        0,
    );
    assert_eq!(joined["lock"]["fence"], 2, "{joined}");
    let log = db.run(&["log"]);
    let log = String::from_utf8_lossy(&log.stdout);
    assert_eq!(old_log.lines().count(), 8, "the fixture's history");
    assert!(
        log.starts_with(&old_log),
        "the old history, first, in order and byte for byte:\n{log}"
    );
}

// ---------------------------------------------------------------------------------------------
// From schema version 4 (server tokens, before the operator's token of a break)
// ---------------------------------------------------------------------------------------------

/// What distlock at 7bf0bff added to [`PG_V2_UPGRADE`] to make schema versions 3 and 4:
/// `UPGRADE_V3` and `UPGRADE_V4` of `src/store/postgres/schema.rs` at that commit, verbatim.
const PG_V3_V4_UPGRADE: &str = "
ALTER TABLE distlock.locks
    ADD COLUMN guarded boolean NOT NULL DEFAULT false;  -- taken by run
UPDATE distlock.meta SET schema_version = 3;
ALTER TABLE distlock.locks
    ADD COLUMN token text NOT NULL DEFAULT '';          -- the server token that took it
ALTER TABLE distlock.history
    ADD COLUMN token text NOT NULL DEFAULT '';
ALTER TABLE distlock.waiters
    ADD COLUMN token text NOT NULL DEFAULT '',          -- '': no token
    DROP CONSTRAINT waiters_resource_owner_key,
    ADD UNIQUE (resource, owner, token);
UPDATE distlock.meta SET schema_version = 4;
";

/// The v4 fixture's `fence_counter`: the last fence that distlock handed out there.
const V4_LAST_FENCE: i64 = 7;

/// Copies the v4 fixture to `path`, with every lease and both places in the queue running for a
/// day from now (a plain UPDATE: the file stays version 4). Returns what distlock at 7bf0bff's
/// `log` printed for it (`tests/fixtures/v4.log`; history times are never moved).
fn v4_sqlite_copy(path: &Path) -> String {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    fs::copy(fixtures.join("v4.db"), path).expect("copy the v4 fixture");
    let conn = Connection::open(path).expect("open the copy");
    let later = now_millis() + DAY_MS;
    conn.execute("UPDATE locks SET expires_at = ?1", [later])
        .expect("move the leases forward");
    conn.execute("UPDATE waiters SET expires_at = ?1", [later])
        .expect("make the places live");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("user_version");
    assert_eq!(version, 4, "the copy is still a version 4 store");
    let last: i64 = conn
        .query_row("SELECT last FROM fence_counter", [], |r| r.get(0))
        .expect("fence counter");
    assert_eq!(last, V4_LAST_FENCE, "the fixture's fence counter");
    fs::read_to_string(fixtures.join("v4.log")).expect("read the v4 fixture's log")
}

/// A row of the v4 fixture's `locks`, every column.
type V4Lock = (
    String,
    String,
    i64,
    i64,
    i64,
    String,
    Option<i64>,
    Option<String>,
    bool,
    String,
);

/// A row of the v4 fixture's `history`, every column but its id.
type V4Event = (
    i64,
    String,
    String,
    i64,
    String,
    Option<String>,
    String,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
);

/// Makes `db` a version 4 store holding the v4 fixture's rows (leases and places moved
/// forward): on SQLite the fixture itself; on PostgreSQL the version 4 schema, filled with
/// plain SQL. Returns the fixture's log (see [`v4_sqlite_copy`]).
fn install_v4(db: &Db) -> String {
    if db.kind == Kind::Sqlite {
        return v4_sqlite_copy(db.path());
    }
    let copy = db.file("v4.db");
    let log = v4_sqlite_copy(&copy);
    let conn = Connection::open(&copy).expect("open the copy");
    let resources: Vec<String> = conn
        .prepare("SELECT resource FROM resources ORDER BY resource")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("resources")
        .collect::<Result<_, _>>()
        .expect("resource rows");
    let locks: Vec<V4Lock> = conn
        .prepare(
            "SELECT resource, owner, fence, acquired_at, expires_at, mode, lim, note, guarded,
                    token FROM locks ORDER BY resource, fence",
        )
        .expect("prepare")
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
            ))
        })
        .expect("locks")
        .collect::<Result<_, _>>()
        .expect("lock rows");
    let history: Vec<V4Event> = conn
        .prepare(
            "SELECT at, resource, owner, fence, event, previous_owner, mode, lim, note,
                    operator, reason, token FROM history ORDER BY id",
        )
        .expect("prepare")
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
                r.get(10)?,
                r.get(11)?,
            ))
        })
        .expect("history")
        .collect::<Result<_, _>>()
        .expect("history rows");
    let waiters: Vec<(String, String, String, i64)> = conn
        .prepare("SELECT resource, owner, token, expires_at FROM waiters ORDER BY ticket")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("waiters")
        .collect::<Result<_, _>>()
        .expect("waiter rows");
    assert_eq!(
        (locks.len(), history.len(), waiters.len()),
        (5, 11, 2),
        "the fixture's rows"
    );
    let mut client = db.pg_client();
    let mut tx = client.transaction().expect("begin");
    tx.batch_execute(PG_V1_SCHEMA).expect("0.1.0's schema");
    tx.batch_execute(PG_V2_UPGRADE)
        .expect("the version 2 schema");
    tx.batch_execute(PG_V3_V4_UPGRADE)
        .expect("the version 4 schema");
    for resource in &resources {
        tx.execute(
            "INSERT INTO distlock.resources (resource) VALUES ($1)",
            &[resource],
        )
        .expect("insert a resource row");
    }
    for l in &locks {
        tx.execute(
            &format!(
                "INSERT INTO distlock.locks (resource, owner, fence, acquired_at, expires_at,
                     mode, lim, note, guarded, token)
                 VALUES ($1, $2, $3, {}, {}, $6, $7, $8, $9, $10)",
                pg_time(4),
                pg_time(5)
            ),
            &[
                &l.0,
                &l.1,
                &l.2,
                &l.3,
                &l.4,
                &l.5,
                &pg_lim(l.6),
                &l.7,
                &l.8,
                &l.9,
            ],
        )
        .expect("insert a lock row");
    }
    for e in &history {
        tx.execute(
            &format!(
                "INSERT INTO distlock.history (at, resource, owner, fence, event,
                     previous_owner, mode, lim, note, operator, reason, token)
                 VALUES ({}, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                pg_time(1)
            ),
            &[
                &e.0,
                &e.1,
                &e.2,
                &e.3,
                &e.4,
                &e.5,
                &e.6,
                &pg_lim(e.7),
                &e.8,
                &e.9,
                &e.10,
                &e.11,
            ],
        )
        .expect("insert a history row");
    }
    for (resource, owner, token, expires_at) in &waiters {
        tx.execute(
            &format!(
                "INSERT INTO distlock.waiters (resource, owner, token, expires_at)
                 VALUES ($1, $2, $3, {})",
                pg_time(4)
            ),
            &[resource, owner, token, expires_at],
        )
        .expect("insert a waiter row");
    }
    tx.execute("SELECT setval('distlock.fence', $1)", &[&V4_LAST_FENCE])
        .expect("the fence sequence");
    tx.commit().expect("commit the v4 store");
    assert_eq!(schema_version(db), 4, "the version 4 schema");
    log
}

#[test]
fn v4_store_is_upgraded_keeping_tokens_places_and_history_and_then_records_who_broke_a_lock() {
    each_store(|db| {
        let old_log = install_v4(db);
        assert_eq!(old_log.lines().count(), 11, "the fixture's history");
        if db.kind == Kind::Sqlite {
            // Reading does not upgrade, and reads the old history as that distlock printed it.
            let log = db.run(&["log"]);
            assert_eq!(String::from_utf8_lossy(&log.stdout), old_log);
            assert_eq!(schema_version(db), 4, "a read left the schema as it was");
        }
        // The first write upgrades.
        db.json(&["release", "deploy", "--owner", "alice"], 0);
        assert_eq!(schema_version(db), NEW_VERSION, "{:?}: upgraded", db.kind);
        assert_sound(db);
        // Both places in the queue are kept, each with its token: with its holder gone, deploy
        // still keeps a newcomer behind bob's place, and bob is granted from it.
        assert_eq!(db.waiting("deploy"), 1, "bob's place");
        assert_eq!(db.waiting("jobs/a"), 1, "the place of w2, token ci");
        let busy = db.json(
            &["acquire", "deploy", "--owner", "carol", "--ttl", "60"],
            75,
        );
        assert_eq!(busy["waiting"], 1, "{busy}");
        let granted = db.json(
            &[
                "acquire", "deploy", "--owner", "bob", "--ttl", "60", "--wait", "5",
            ],
            0,
        );
        let fence = granted["lock"]["fence"].as_i64().expect("fence");
        assert!(
            fence > V4_LAST_FENCE,
            "a fence after the old store's last: {granted}"
        );
        // The tenure token ci took is still ci's: its owner's name alone does not release it.
        db.json(&["release", "jobs/a", "--owner", "w"], 77);
        // The tenure `run` took and kept is still guarded; the shared one may still be joined.
        db.json(&["acquire", "kept", "--owner", "cron", "--ttl", "60"], 75);
        let joined = db.json(
            &[
                "acquire", "reports", "--owner", "r1", "--shared", "--ttl", "60",
            ],
            0,
        );
        assert_eq!(joined["lock"]["fence"], 2, "{joined}");
        // The old history first, in order and byte for byte: its breaks name no operator's
        // token (version 4 did not record one).
        let log = db.run(&["log"]);
        let log = String::from_utf8_lossy(&log.stdout);
        assert!(
            log.starts_with(&old_log),
            "the old history, first, in order and byte for byte:\n{log}"
        );
        // On the upgraded store, an operator's break through a server records its token.
        let ops = make_token(db, "ops", &["--all-resources", "--operator"]);
        let tokens = db.file("tokens.json").display().to_string();
        let server = Server::start_serving(db, &["--tokens", &tokens]);
        let broken = call(
            &server,
            "POST",
            &lock_path("jobs/a", "/break"),
            Some(&ops),
            Some(&json!({"reason": "stuck", "by": "ci-bot@innocent"})),
        );
        assert_eq!(broken.status, 200);
        let last = db.log(&["jobs/a", "--limit", "1"]);
        assert_eq!(
            (
                &last[0]["event"],
                &last[0]["token"],
                &last[0]["by"],
                &last[0]["by_token"]
            ),
            (
                &json!("broken"),
                &json!("ci"),
                &json!("ci-bot@innocent"),
                &json!("ops")
            ),
            "{last:?}"
        );
        assert_eq!(schema_version(db), NEW_VERSION);
        assert_sound(db);
    });
}

#[test]
fn many_processes_opening_one_v4_store_at_once_all_succeed_and_it_is_upgraded_once() {
    each_store(|db| {
        let old_log = install_v4(db);
        let processes = acquire_all_at_once(db, V4_LAST_FENCE);
        assert_eq!(schema_version(db), NEW_VERSION, "{:?}: upgraded", db.kind);
        assert_sound(db);
        let log = db.run(&["log"]);
        let log = String::from_utf8_lossy(&log.stdout);
        assert!(log.starts_with(&old_log), "the old history first:\n{log}");
        assert_eq!(
            log.lines().count(),
            old_log.lines().count() + processes,
            "old history and one event each"
        );
        assert_eq!(db.waiting("jobs/a"), 1, "the token's place in the queue");
    });
}
