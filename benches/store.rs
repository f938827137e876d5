//! In-process cost of the SQLite store's operations, on an empty file and on a file holding
//! 100,000 live locks and 1,000,000 history rows, against raw rusqlite running the same SQL.
//!
//! `cargo bench --bench store`. Every operation commits with `synchronous=FULL`, so on most
//! disks the fsync dominates; compare the ratios, not the absolute times.

use std::path::Path;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use distlock::engine::Request;
use distlock::lock::{Members, Mode, Owner, Resource, Ttl};
use distlock::store::{Locks, SqliteStore, SystemClock, op};
use rusqlite::{Connection, TransactionBehavior, params};

const LIVE_LOCKS: i64 = 100_000;
const HISTORY_ROWS: i64 = 1_000_000;

fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path, Box::new(SystemClock)).expect("open store")
}

/// A distlock database with `LIVE_LOCKS` live locks and `HISTORY_ROWS` history rows.
fn large_file(path: &Path) {
    drop(open(path));
    let mut conn = Connection::open(path).expect("open");
    let tx = conn.transaction().expect("tx");
    let far = 4_102_444_800_000_i64; // 2100-01-01
    {
        let mut lock = tx
            .prepare(
                "INSERT INTO locks (resource, owner, fence, acquired_at, expires_at) \
                 VALUES (?1, ?2, ?3, 0, ?4)",
            )
            .expect("prepare");
        for i in 0..LIVE_LOCKS {
            lock.execute(params![
                format!("resource:{i:06}"),
                format!("owner-{i}"),
                i + 1,
                far
            ])
            .expect("insert lock");
        }
        let mut event = tx
            .prepare(
                "INSERT INTO history (at, resource, owner, fence, event) \
                 VALUES (?1, ?2, ?3, ?4, 'renewed')",
            )
            .expect("prepare");
        for i in 0..HISTORY_ROWS {
            let r = i % LIVE_LOCKS;
            event
                .execute(params![
                    i,
                    format!("resource:{r:06}"),
                    format!("owner-{r}"),
                    r + 1
                ])
                .expect("insert event");
        }
        tx.execute("UPDATE fence_counter SET last = ?1", [LIVE_LOCKS])
            .expect("counter");
    }
    tx.commit().expect("commit");
}

/// An acquire by `owner` in `mode`, without a note.
fn request(owner: &str, mode: Mode) -> Request {
    Request {
        owner: Owner::parse(owner).expect("owner"),
        ttl: Ttl::from_secs(60).expect("ttl"),
        mode,
        note: None,
        waits: false,
        guarded: false,
    }
}

/// The store's acquire of `resource` alone, as `request` asks.
fn acquire(resource: &Resource, request: &Request) -> op::Acquire {
    op::Acquire {
        members: Members::one(resource.clone()),
        request: request.clone(),
        until: None,
    }
}

/// The store's release of `resource` by `owner`.
fn release(resource: &Resource, owner: &Owner) -> op::Release {
    op::Release {
        members: Members::one(resource.clone()),
        owner: owner.clone(),
        fences: None,
    }
}

fn store_operations(c: &mut Criterion) {
    let plain = request("bench", Mode::Exclusive);
    let owner = &plain.owner;
    let ttl = plain.ttl;
    for (label, large) in [("empty", false), ("large", true)] {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("locks.db");
        if large {
            large_file(&path);
        }
        let mut store = open(&path);
        let resource = Resource::parse("bench:resource").expect("resource");
        let mut group = c.benchmark_group(format!("store/{label}"));
        group.bench_function("acquire+release", |b| {
            b.iter(|| {
                store.perform(acquire(&resource, &plain)).expect("acquire");
                let _ = store.perform(release(&resource, owner)).expect("release");
            });
        });
        // The semaphore's admission reads the resource's live tenures only: with 49 of 50
        // slots taken it must cost about what a plain acquire costs (no scan of history, no
        // growth with N).
        let semaphore = Resource::parse("bench:semaphore").expect("resource");
        for i in 0..49 {
            let holder = request(&format!("holder-{i}"), Mode::Semaphore(50));
            store.perform(acquire(&semaphore, &holder)).expect("holder");
        }
        let fiftieth = request("bench", Mode::Semaphore(50));
        group.bench_function("acquire+release --limit 50 beside 49 holders", |b| {
            b.iter(|| {
                let acquired = store.perform(acquire(&semaphore, &fiftieth));
                let outcome = acquired.expect("acquire").outcome;
                assert!(matches!(
                    outcome,
                    distlock::lock::SetAcquire::Acquired { .. }
                ));
                let _ = store.perform(release(&semaphore, owner)).expect("release");
            });
        });
        store.perform(acquire(&resource, &plain)).expect("acquire");
        let renew = op::Renew {
            members: Members::one(resource.clone()),
            owner: owner.clone(),
            ttl,
            fences: None,
            lease_end: None,
        };
        group.bench_function("renew", |b| {
            b.iter(|| store.perform(renew.clone()).expect("renew"));
        });
        let status = op::Status {
            resource: resource.clone(),
        };
        group.bench_function("status", |b| {
            b.iter(|| store.perform(status.clone()).expect("status"));
        });
        group.bench_function("open", |b| {
            b.iter_batched(|| (), |()| open(&path), BatchSize::PerIteration);
        });
        group.finish();
    }
}

/// The same statements as the store's acquire and release, through rusqlite directly: the
/// ceiling for the store's own overhead.
fn raw_rusqlite(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("locks.db");
    drop(open(&path));
    let mut conn = Connection::open(&path).expect("open");
    conn.pragma_update(None, "synchronous", "FULL")
        .expect("pragma");
    conn.busy_timeout(Duration::from_secs(5)).expect("busy");
    let mut group = c.benchmark_group("raw-rusqlite");
    group.bench_function("acquire+release", |b| {
        b.iter(|| {
            let now = 1_000_i64;
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .expect("begin");
            let held: Option<i64> = tx
                .prepare_cached("SELECT fence FROM locks WHERE resource = ?1")
                .expect("prepare")
                .query_row(["bench:resource"], |r| r.get(0))
                .ok();
            assert!(held.is_none());
            let fence: i64 = tx
                .prepare_cached(
                    "UPDATE fence_counter SET last = last + 1 WHERE id = 0 RETURNING last",
                )
                .expect("prepare")
                .query_row([], |r| r.get(0))
                .expect("fence");
            tx.prepare_cached(
                "INSERT INTO locks (resource, owner, fence, acquired_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (resource, owner) DO UPDATE SET
                     owner = excluded.owner, fence = excluded.fence,
                     acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
            )
            .expect("prepare")
            .execute(params!["bench:resource", "bench", fence, now, now + 60_000])
            .expect("insert");
            tx.prepare_cached(
                "INSERT INTO history (at, resource, owner, fence, event, previous_owner)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .expect("prepare")
            .execute(params![
                now,
                "bench:resource",
                "bench",
                fence,
                "acquired",
                None::<String>
            ])
            .expect("history");
            tx.commit().expect("commit");

            // The store commits a release without its own fsync; so does the baseline.
            conn.pragma_update(None, "synchronous", "NORMAL")
                .expect("pragma");
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .expect("begin");
            tx.prepare_cached("SELECT fence FROM locks WHERE resource = ?1")
                .expect("prepare")
                .query_row(["bench:resource"], |r| r.get::<_, i64>(0))
                .expect("held");
            tx.prepare_cached("DELETE FROM locks WHERE resource = ?1")
                .expect("prepare")
                .execute(["bench:resource"])
                .expect("delete");
            tx.prepare_cached(
                "INSERT INTO history (at, resource, owner, fence, event, previous_owner)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .expect("prepare")
            .execute(params![
                now,
                "bench:resource",
                "bench",
                fence,
                "released",
                None::<String>
            ])
            .expect("history");
            tx.commit().expect("commit");
            conn.pragma_update(None, "synchronous", "FULL")
                .expect("pragma");
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = store_operations, raw_rusqlite
}
criterion_main!(benches);
