//! The multi-host store: PostgreSQL, for locks shared by many machines.
//!
//! - **The server's clock decides.** `acquired_at`, `expires_at` and every "is it live?" check
//!   use the server's `now()`, never this host's clock, so a client whose clock is off still gets
//!   exactly its TTL. Times are truncated to milliseconds, as they are printed.
//! - Every operation that may write is one READ COMMITTED transaction that first locks the
//!   resource's row (`SELECT … FOR UPDATE`); a missing row is inserted with
//!   `ON CONFLICT (resource) DO NOTHING`, and if a racing insert won, the row is read again.
//!   Serialization failures and deadlocks are retried a bounded number of times.
//! - Fences come from the sequence `distlock.fence` (never cycles; values are never reused, even
//!   after a rollback or a crash).
//! - The schema lives in its own `distlock` schema and is created on first use under a
//!   transaction-level advisory lock, so many processes starting at once create it exactly once.
//! - Waiting is bounded: a connect timeout, TCP keepalives and a user timeout, and server-side
//!   statement and lock timeouts.
//! - The password never appears in a message: errors name the host, port, database and user only.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use postgres::error::SqlState;
use postgres::{Client, Config, NoTls, Row, Transaction};

use super::{GcReport, LockStore, SCHEMA_VERSION};
use crate::lock::{
    Acquire, Event, EventKind, Fence, Holder, Lock, LogQuery, Owner, Refusal, Release, Renew,
    Resource, Tenure, Timestamp, Ttl,
};

/// How long connecting may take, and how long one statement may run on the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const STATEMENT_TIMEOUT_MS: u32 = 5_000;

/// How long this client waits for connecting and logging in, and for each operation: a little
/// over the server-side limits, so a slow server's own error arrives first.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);
const CALL_TIMEOUT: Duration = Duration::from_secs(8);

/// Attempts per operation when the server reports a serialization failure or deadlock.
const ATTEMPTS: usize = 5;

const GC_BATCH: i64 = 1000;

/// An arbitrary, fixed advisory-lock key that serializes schema creation.
const SCHEMA_LOCK_KEY: i64 = 0x6469_7374_6c6f_636b;

const SCHEMA: &str = "
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

/// `now()` truncated to what we print.
const NOW: &str = "date_trunc('milliseconds', now())";

/// The lock columns as milliseconds since the epoch.
const LOCK_COLUMNS: &str = "owner, fence, (extract(epoch FROM acquired_at) * 1000)::bigint, \
                            (extract(epoch FROM expires_at) * 1000)::bigint";

/// A PostgreSQL store: a connection on a worker thread of its own, so that every call can be
/// given up on after [`CALL_TIMEOUT`] even when the server accepts bytes and never answers
/// (the driver itself only bounds the TCP connect).
pub struct PostgresStore {
    /// `None` once dropped, which ends the worker.
    jobs: Option<Sender<Job>>,
    /// Hears from the worker when it has closed the connection.
    closed: Receiver<()>,
    /// `user@host:port/db`, for messages.
    shown: String,
    /// A call timed out: the worker may still be stuck in it, so later calls fail at once.
    stuck: bool,
}

type Job = Box<dyn FnOnce(&mut Session) + Send>;

/// The connection, owned by the worker thread.
struct Session {
    client: Client,
}

/// How to secure the connection: libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyFull,
}

/// A parsed `postgres://` URL, checked before anything connects.
pub struct Target {
    config: Config,
    ssl: SslMode,
    root_cert: Option<String>,
}

impl Target {
    /// Parses `url`. `sslmode` (disable, prefer (the default), require, verify-full) and
    /// `sslrootcert` are read here; every other setting goes to the driver as it is.
    ///
    /// # Errors
    ///
    /// A message (never containing the password) for an unreadable URL or setting.
    pub fn parse(url: &str) -> Result<Target, String> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut ssl = SslMode::Prefer;
        let mut root_cert = None;
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "sslmode" => {
                    ssl = match value {
                        "disable" => SslMode::Disable,
                        "prefer" => SslMode::Prefer,
                        "require" => SslMode::Require,
                        "verify-full" => SslMode::VerifyFull,
                        other => {
                            return Err(format!(
                                "unsupported sslmode {other:?} in the PostgreSQL URL; use \
                                 disable, prefer, require or verify-full"
                            ));
                        }
                    }
                }
                "sslrootcert" => root_cert = Some(percent_decode(value)),
                _ => rest.push(pair),
            }
        }
        let stripped = if rest.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let mut config: Config = stripped
            .parse()
            .map_err(|e| scrub(format!("invalid PostgreSQL URL: {e}"), url))?;
        if config.get_password().is_none() {
            if let Some(password) = std::env::var_os("PGPASSWORD") {
                config.password(password.as_encoded_bytes());
            }
        }
        // distlock's defaults; a name or connect timeout given in the URL wins.
        if config.get_application_name().is_none() {
            config.application_name("distlock");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(5))
            .keepalives_interval(Duration::from_secs(1))
            .keepalives_retries(3)
            .tcp_user_timeout(Duration::from_secs(10));
        // The URL's own `options` come last, so a user's setting wins over these defaults.
        let options = format!(
            "-c statement_timeout={STATEMENT_TIMEOUT_MS} -c lock_timeout={STATEMENT_TIMEOUT_MS} \
             -c idle_in_transaction_session_timeout=30000 {}",
            config.get_options().unwrap_or("")
        );
        config.options(options.trim_end());
        Ok(Target {
            config,
            ssl,
            root_cert,
        })
    }

    /// `user@host:port/db`, for messages.
    fn describe(&self) -> String {
        let host = match self.config.get_hosts().first() {
            Some(postgres::config::Host::Tcp(host)) => host.clone(),
            Some(postgres::config::Host::Unix(path)) => path.display().to_string(),
            None => "localhost".to_owned(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        let user = self.config.get_user().unwrap_or("(default user)");
        let db = self.config.get_dbname().unwrap_or(user);
        format!("{user}@{host}:{port}/{db}")
    }

    fn connect(&self) -> Result<Client> {
        let mut config = self.config.clone();
        match self.ssl {
            SslMode::Disable => {
                config.ssl_mode(postgres::config::SslMode::Disable);
                Ok(config.connect(NoTls)?)
            }
            SslMode::Prefer | SslMode::Require => {
                config.ssl_mode(if self.ssl == SslMode::Prefer {
                    postgres::config::SslMode::Prefer
                } else {
                    postgres::config::SslMode::Require
                });
                let tls = tls::unverified()?;
                Ok(config.connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))?)
            }
            SslMode::VerifyFull => {
                config.ssl_mode(postgres::config::SslMode::Require);
                let tls = tls::verified(self.root_cert.as_deref())?;
                Ok(config.connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))?)
            }
        }
    }
}

/// Replaces the URL's password, wherever it appears in `message`, with `***`.
fn scrub(message: String, url: &str) -> String {
    let password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split(['/', '?']).next())
        .and_then(|authority| authority.rsplit_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, password)| password)
        .filter(|p| !p.is_empty());
    match password {
        Some(password) => message
            .replace(password, "***")
            .replace(&percent_decode(password), "***"),
        None => message,
    }
}

fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl PostgresStore {
    /// Connects and brings the schema up, on a new worker thread.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached, refuses the login or does not answer within
    /// [`OPEN_TIMEOUT`], the schema is newer than this build understands, or a statement fails.
    pub fn open(url: &str) -> Result<PostgresStore> {
        let target = Target::parse(url).map_err(|e| anyhow!(e))?;
        let shown = target.describe();
        let (ready_tx, ready) = mpsc::channel();
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (closed_tx, closed) = mpsc::channel();
        std::thread::spawn(move || {
            let session = target.connect().and_then(|client| {
                let mut session = Session { client };
                session.prepare()?;
                Ok(session)
            });
            match session {
                Ok(mut session) => {
                    if ready_tx.send(Ok(())).is_ok() {
                        for job in job_rx {
                            job(&mut session);
                        }
                    }
                    // Dropping the client says goodbye to the server (a Terminate message).
                    drop(session);
                    let _ = closed_tx.send(());
                }
                Err(err) => {
                    let _ = ready_tx.send(Err(err));
                }
            }
        });
        let opened = match ready.recv_timeout(OPEN_TIMEOUT) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => Err(format!("{err:#}")),
            Err(_) => Err(format!("no answer within {} s", OPEN_TIMEOUT.as_secs())),
        };
        match opened {
            Ok(()) => Ok(PostgresStore {
                jobs: Some(jobs),
                closed,
                shown,
                stuck: false,
            }),
            Err(message) => Err(anyhow!(scrub(
                format!("PostgreSQL {shown}: {message}"),
                url
            ))),
        }
    }

    /// Runs `op` on the worker's connection and waits at most [`CALL_TIMEOUT`] for it.
    fn call<T: Send + 'static>(
        &mut self,
        op: impl FnOnce(&mut Session) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        if self.stuck {
            bail!(
                "PostgreSQL {}: the connection is unusable after an earlier timeout",
                self.shown
            );
        }
        let (done, result) = mpsc::channel();
        let job: Job = Box::new(move |session| {
            let _ = done.send(op(session));
        });
        if self
            .jobs
            .as_ref()
            .is_none_or(|jobs| jobs.send(job).is_err())
        {
            bail!("PostgreSQL {}: the connection is gone", self.shown);
        }
        match result.recv_timeout(CALL_TIMEOUT) {
            Ok(outcome) => outcome.with_context(|| format!("PostgreSQL {}", self.shown)),
            Err(_) => {
                self.stuck = true;
                bail!(
                    "PostgreSQL {}: no answer within {} s",
                    self.shown,
                    CALL_TIMEOUT.as_secs()
                )
            }
        }
    }
}

impl Drop for PostgresStore {
    /// Lets the worker close the connection politely before the process exits, so the server
    /// does not log a reset connection for every call; bounded, and skipped for a connection
    /// that already stopped answering.
    fn drop(&mut self) {
        drop(self.jobs.take());
        if !self.stuck {
            let _ = self.closed.recv_timeout(Duration::from_secs(1));
        }
    }
}

impl Session {
    fn prepare(&mut self) -> Result<()> {
        let version = match self
            .client
            .query_opt("SELECT schema_version FROM distlock.meta", &[])
        {
            Ok(row) => row.map_or(0, |r| i64::from(r.get::<_, i32>(0))),
            Err(err)
                if matches!(
                    err.code(),
                    Some(&SqlState::UNDEFINED_TABLE | &SqlState::INVALID_SCHEMA_NAME)
                ) =>
            {
                0
            }
            Err(err) => return Err(err).context("cannot read the schema version"),
        };
        if version > SCHEMA_VERSION {
            bail!(
                "the database was set up by a newer distlock (schema version {version}; this one \
                 understands up to {SCHEMA_VERSION}): upgrade distlock"
            );
        }
        if version < SCHEMA_VERSION {
            let mut tx = self.client.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK_KEY])?;
            tx.batch_execute(SCHEMA)
                .context("cannot create the distlock schema")?;
            tx.commit()?;
        }
        Ok(())
    }

    /// Runs `op` in a fresh transaction, retrying serialization failures and deadlocks.
    fn in_transaction<T>(
        &mut self,
        mut op: impl FnMut(&mut Transaction<'_>) -> Result<Option<T>, postgres::Error>,
    ) -> Result<T> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = self.client.transaction().and_then(|mut tx| {
                let value = op(&mut tx)?;
                tx.commit()?;
                Ok(value)
            });
            match result {
                Ok(Some(value)) => return Ok(value),
                // The operation asked to start over (a racing insert won).
                Ok(None) if attempt < ATTEMPTS => {}
                Ok(None) => bail!("the lock row kept changing; gave up after {ATTEMPTS} attempts"),
                Err(err) if attempt < ATTEMPTS && is_transient(&err) => {}
                Err(err) => return Err(err.into()),
            }
        }
    }
}

fn is_transient(err: &postgres::Error) -> bool {
    matches!(
        err.code(),
        Some(&SqlState::T_R_SERIALIZATION_FAILURE | &SqlState::T_R_DEADLOCK_DETECTED)
    )
}

/// The resource's row, locked for the rest of the transaction, with whether it is live.
struct Current {
    owner: String,
    fence: i64,
    expires_at: i64,
    live: bool,
}

fn current(tx: &mut Transaction<'_>, resource: &str) -> Result<Option<Current>, postgres::Error> {
    let sql = format!(
        "SELECT {LOCK_COLUMNS}, expires_at > now() FROM distlock.locks
         WHERE resource = $1 FOR UPDATE"
    );
    Ok(tx.query_opt(&sql, &[&resource])?.map(|r| Current {
        owner: r.get(0),
        fence: r.get(1),
        expires_at: r.get(3),
        live: r.get(4),
    }))
}

/// The live lock of `owner`'s tenure on `resource`, locked for this transaction, or why not.
fn own_tenure(
    tx: &mut Transaction<'_>,
    resource: &str,
    owner: &Owner,
    fence: Option<Fence>,
) -> Result<Result<Current, Refusal>, postgres::Error> {
    Ok(match current(tx, resource)? {
        Some(held) if held.live => match Refusal::check(&held.owner, held.fence, owner, fence) {
            Some(refusal) => Err(refusal),
            None => Ok(held),
        },
        _ => Err(Refusal::NotFound),
    })
}

fn record(
    tx: &mut Transaction<'_>,
    resource: &str,
    owner: &str,
    fence: i64,
    event: EventKind,
    previous_owner: Option<&str>,
) -> Result<(), postgres::Error> {
    let sql = format!(
        "INSERT INTO distlock.history (at, resource, owner, fence, event, previous_owner)
         VALUES ({NOW}, $1, $2, $3, $4, $5)"
    );
    tx.execute(
        &sql,
        &[&resource, &owner, &fence, &event.as_str(), &previous_owner],
    )?;
    Ok(())
}

fn lock_of(resource: &Resource, row: &Row) -> Lock {
    Lock {
        resource: resource.clone(),
        owner: Owner::from_store(row.get(0)),
        fence: Fence(row.get(1)),
        acquired_at: Timestamp(row.get(2)),
        expires_at: Timestamp(row.get(3)),
    }
}

impl LockStore for Session {
    fn acquire(&mut self, resource: &Resource, owner: &Owner, ttl: Ttl) -> Result<Acquire> {
        let ttl_ms = ttl.as_millis();
        let (res, who) = (resource.as_str(), owner.as_str());
        self.in_transaction(|tx| {
            let held = current(tx, res)?;
            let (sql, event, previous) = match &held {
                Some(held) if held.live && held.owner != who => {
                    return Ok(Some(Acquire::Busy {
                        holder: Holder {
                            owner: Owner::from_store(&held.owner),
                            expires_at: Timestamp(held.expires_at),
                        },
                    }));
                }
                Some(held) if held.live => (
                    format!(
                        "UPDATE distlock.locks
                         SET acquired_at = {NOW}, expires_at = {NOW} + $3::bigint * interval '1 ms'
                         WHERE resource = $1 AND owner = $2 RETURNING {LOCK_COLUMNS}"
                    ),
                    EventKind::Extended,
                    None,
                ),
                Some(held) => (
                    format!(
                        "UPDATE distlock.locks
                         SET owner = $2, fence = nextval('distlock.fence'),
                             acquired_at = {NOW}, expires_at = {NOW} + $3::bigint * interval '1 ms'
                         WHERE resource = $1 RETURNING {LOCK_COLUMNS}"
                    ),
                    EventKind::TakenOver,
                    Some(held.owner.as_str()),
                ),
                None => (
                    format!(
                        "INSERT INTO distlock.locks (resource, owner, fence, acquired_at, expires_at)
                         VALUES ($1, $2, nextval('distlock.fence'), {NOW},
                                 {NOW} + $3::bigint * interval '1 ms')
                         ON CONFLICT (resource) DO NOTHING RETURNING {LOCK_COLUMNS}"
                    ),
                    EventKind::Acquired,
                    None,
                ),
            };
            let Some(row) = tx.query_opt(&sql, &[&res, &who, &ttl_ms])? else {
                // A racing insert committed first: start over and see its row.
                return Ok(None);
            };
            let lock = lock_of(resource, &row);
            record(tx, res, who, lock.fence.0, event, previous)?;
            let tenure = if event == EventKind::Extended {
                Tenure::Extended
            } else {
                Tenure::New
            };
            Ok(Some(Acquire::Acquired { lock, tenure }))
        })
    }

    fn status(&mut self, resource: &Resource) -> Result<Option<Lock>> {
        let sql = format!(
            "SELECT {LOCK_COLUMNS} FROM distlock.locks WHERE resource = $1 AND expires_at > now()"
        );
        let row = self.client.query_opt(&sql, &[&resource.as_str()])?;
        Ok(row.map(|row| lock_of(resource, &row)))
    }

    fn renew(
        &mut self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        fence: Option<Fence>,
    ) -> Result<Renew> {
        let ttl_ms = ttl.as_millis();
        let (res, who) = (resource.as_str(), owner.as_str());
        self.in_transaction(|tx| {
            let held = match own_tenure(tx, res, owner, fence)? {
                Ok(held) => held,
                Err(refusal) => return Ok(Some(refusal.into())),
            };
            let sql = format!(
                "UPDATE distlock.locks SET expires_at = {NOW} + $2::bigint * interval '1 ms'
                 WHERE resource = $1 RETURNING {LOCK_COLUMNS}"
            );
            let row = tx.query_one(&sql, &[&res, &ttl_ms])?;
            record(tx, res, who, held.fence, EventKind::Renewed, None)?;
            Ok(Some(Renew::Renewed {
                lock: lock_of(resource, &row),
            }))
        })
    }

    fn release(
        &mut self,
        resource: &Resource,
        owner: &Owner,
        fence: Option<Fence>,
    ) -> Result<Release> {
        let (res, who) = (resource.as_str(), owner.as_str());
        self.in_transaction(|tx| {
            let held = match own_tenure(tx, res, owner, fence)? {
                Ok(held) => held,
                Err(refusal) => return Ok(Some(refusal.into())),
            };
            tx.execute("DELETE FROM distlock.locks WHERE resource = $1", &[&res])?;
            record(tx, res, who, held.fence, EventKind::Released, None)?;
            Ok(Some(Release::Released))
        })
    }

    fn list(&mut self, prefix: &str) -> Result<Vec<Lock>> {
        // COLLATE "C" sorts by bytes, as the SQLite store does, whatever the database's locale.
        let sql = format!(
            "SELECT {LOCK_COLUMNS}, resource FROM distlock.locks
             WHERE expires_at > now() AND starts_with(resource, $1)
             ORDER BY resource COLLATE \"C\""
        );
        let rows = self.client.query(&sql, &[&prefix])?;
        Ok(rows
            .iter()
            .map(|row| lock_of(&Resource::from_store(row.get(4)), row))
            .collect())
    }

    fn log(&mut self, query: &LogQuery) -> Result<Vec<Event>> {
        let limit = query.limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let since_ms = query
            .since
            .map(|ago| i64::try_from(ago.as_millis()).unwrap_or(i64::MAX));
        let resource = query.resource.as_ref().map(Resource::as_str);
        let rows = self.client.query(
            "SELECT (extract(epoch FROM at) * 1000)::bigint, resource, owner, fence, event,
                    previous_owner
             FROM (SELECT * FROM distlock.history
                   WHERE ($1::text IS NULL OR resource = $1)
                     AND ($2::bigint IS NULL OR at >= now() - $2::bigint * interval '1 ms')
                   ORDER BY id DESC LIMIT $3) newest
             ORDER BY id",
            &[&resource, &since_ms, &limit],
        )?;
        rows.iter()
            .map(|r| {
                let kind: &str = r.get(4);
                let event = EventKind::parse(kind)
                    .ok_or_else(|| anyhow!("the history holds an unknown event kind {kind:?}"))?;
                Ok(Event {
                    at: Timestamp(r.get(0)),
                    resource: Resource::from_store(r.get(1)),
                    owner: Owner::from_store(r.get(2)),
                    fence: Fence(r.get(3)),
                    event,
                    previous_owner: r.get::<_, Option<&str>>(5).map(Owner::from_store),
                })
            })
            .collect()
    }

    fn gc(&mut self, keep_history: Duration) -> Result<GcReport> {
        let keep_ms = i64::try_from(keep_history.as_millis()).unwrap_or(i64::MAX);
        let mut report = GcReport::default();
        loop {
            let deleted = self.client.execute(
                "DELETE FROM distlock.locks WHERE resource IN (
                     SELECT resource FROM distlock.locks WHERE expires_at <= now()
                     LIMIT $1 FOR UPDATE SKIP LOCKED)",
                &[&GC_BATCH],
            )?;
            report.expired_locks += deleted;
            if deleted == 0 {
                break;
            }
        }
        loop {
            let deleted = self.client.execute(
                "DELETE FROM distlock.history WHERE id IN (
                     SELECT id FROM distlock.history
                     WHERE at < now() - $1::bigint * interval '1 ms' ORDER BY id LIMIT $2)",
                &[&keep_ms, &GC_BATCH],
            )?;
            report.history_events += deleted;
            if deleted == 0 {
                break;
            }
        }
        Ok(report)
    }
}

impl LockStore for PostgresStore {
    fn acquire(&mut self, resource: &Resource, owner: &Owner, ttl: Ttl) -> Result<Acquire> {
        let (resource, owner) = (resource.clone(), owner.clone());
        self.call(move |s| s.acquire(&resource, &owner, ttl))
    }

    fn status(&mut self, resource: &Resource) -> Result<Option<Lock>> {
        let resource = resource.clone();
        self.call(move |s| s.status(&resource))
    }

    fn renew(
        &mut self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        fence: Option<Fence>,
    ) -> Result<Renew> {
        let (resource, owner) = (resource.clone(), owner.clone());
        self.call(move |s| s.renew(&resource, &owner, ttl, fence))
    }

    fn release(
        &mut self,
        resource: &Resource,
        owner: &Owner,
        fence: Option<Fence>,
    ) -> Result<Release> {
        let (resource, owner) = (resource.clone(), owner.clone());
        self.call(move |s| s.release(&resource, &owner, fence))
    }

    fn list(&mut self, prefix: &str) -> Result<Vec<Lock>> {
        let prefix = prefix.to_owned();
        self.call(move |s| s.list(&prefix))
    }

    fn log(&mut self, query: &LogQuery) -> Result<Vec<Event>> {
        let query = query.clone();
        self.call(move |s| s.log(&query))
    }

    fn gc(&mut self, keep_history: Duration) -> Result<GcReport> {
        self.call(move |s| s.gc(keep_history))
    }
}

/// rustls client configurations for the two kinds of TLS the URL can ask for.
mod tls {
    use super::Arc;
    use anyhow::{Context, Result};
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    /// `sslmode=prefer|require`: encrypted, but the server is not authenticated (libpq's
    /// meaning of these modes). Handshake signatures are still checked.
    pub fn unverified() -> Result<rustls::ClientConfig> {
        let provider = provider();
        let algorithms = provider.signature_verification_algorithms;
        Ok(ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(algorithms)))
            .with_no_client_auth())
    }

    /// `sslmode=verify-full`: the certificate chain must lead to `root_cert` (a PEM file), or to
    /// the system's trusted roots, and name the host.
    pub fn verified(root_cert: Option<&str>) -> Result<rustls::ClientConfig> {
        let mut roots = RootCertStore::empty();
        match root_cert {
            Some(path) => {
                for cert in CertificateDer::pem_file_iter(path)
                    .with_context(|| format!("cannot read sslrootcert {path}"))?
                {
                    roots.add(cert.with_context(|| format!("bad certificate in {path}"))?)?;
                }
            }
            None => {
                for cert in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(cert);
                }
            }
        }
        Ok(ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth())
    }

    #[derive(Debug)]
    struct AnyCertificate(WebPkiSupportedAlgorithms);

    impl ServerCertVerifier for AnyCertificate {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp_response: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.supported_schemes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_scrubbed() {
        let url = "postgres://user:s3cr%21t@db.example:5432/locks";
        assert_eq!(
            scrub("failed for s3cr%21t and s3cr!t".into(), url),
            "failed for *** and ***"
        );
        assert_eq!(scrub("nothing".into(), "postgres://u@h/db"), "nothing");
    }

    #[test]
    fn sslmode_is_read_here_and_the_rest_passes_through() {
        let t = Target::parse("postgres://u:p@h:6543/d?sslmode=verify-full&sslrootcert=%2Fca.pem")
            .unwrap();
        assert_eq!(t.ssl, SslMode::VerifyFull);
        assert_eq!(t.root_cert.as_deref(), Some("/ca.pem"));
        assert_eq!(t.describe(), "u@h:6543/d");
        assert_eq!(
            Target::parse("postgresql://u@h/d").unwrap().ssl,
            SslMode::Prefer
        );
        let err = Target::parse("postgres://u:hunter2@h/d?sslmode=bogus")
            .err()
            .unwrap();
        assert!(err.contains("sslmode"), "{err}");
        let err = Target::parse("postgres://u:hunter2@h:notaport/d")
            .err()
            .unwrap();
        assert!(!err.contains("hunter2"), "{err}");
    }
}
