//! A PostgreSQL database made for one test on the suite's server (`DISTLOCK_TEST_PG_URL`), and
//! dropped when the test is done.
//!
//! Compiled into both `tests/cli` (as `common::pg_database`, behind [`super::store::Db`]) and
//! `tests/recipes.rs` (by `#[path]`, for the recipes run over PostgreSQL): everything here is
//! used by both.

use super::require::require;

/// A database created for one test on the suite's PostgreSQL server, dropped afterwards.
pub struct PgDatabase {
    admin: String,
    name: String,
    /// Its connection URL: the admin URL with this database's name.
    pub url: String,
}

/// The suite's PostgreSQL server, as an admin URL (`DISTLOCK_TEST_PG_URL`), through the gate
/// ([`require`], tool `PG`): without one, `what` is skipped, or fails under
/// `DISTLOCK_TEST_REQUIRE_PG`.
pub fn pg_admin_url(what: &str) -> Option<String> {
    let url = std::env::var("DISTLOCK_TEST_PG_URL")
        .map_err(|_| "DISTLOCK_TEST_PG_URL is not set (scripts/pg-test-server)".to_owned());
    require("PG", what, url)
}

impl PgDatabase {
    /// `CREATE DATABASE <fresh name> <options>` on the server behind `admin`. An unreachable
    /// server fails the test; a refused `CREATE` is the caller's to judge.
    pub fn create(admin: &str, options: &str) -> Result<PgDatabase, postgres::Error> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!(
            "distlock_test_{}_{n}_{:08x}",
            std::process::id(),
            fastrand::u32(..)
        );
        let mut client = postgres::Client::connect(admin, postgres::NoTls)
            .unwrap_or_else(|e| panic!("cannot reach the test server: {e}"));
        client.batch_execute(&format!("CREATE DATABASE {name} {options}"))?;
        // Same server and credentials, another database.
        let (base, query) = admin.split_once('?').unwrap_or((admin, ""));
        let (server, _) = base.rsplit_once('/').expect("a URL with a database name");
        let url = if query.is_empty() {
            format!("{server}/{name}")
        } else {
            format!("{server}/{name}?{query}")
        };
        Ok(PgDatabase {
            admin: admin.to_owned(),
            name,
            url,
        })
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = client.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}
