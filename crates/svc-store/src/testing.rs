//! Fresh PostgreSQL databases for tests. Each [`TestSchema`] is a schema of
//! its own inside one shared database, reached through `search_path` in its
//! URL, so tests running in parallel, and the processes they start, never
//! see each other's rows. Not for production use.

use sqlx::migrate::Migrator;
use sqlx::{AnyConnection, Connection, Executor};
use svc_core::store::StoreError;

use crate::error::context;
use crate::{Backend, SqlStore};

/// Where tests find PostgreSQL unless [`POSTGRES_URL_VAR`] says otherwise.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// The environment variable that overrides [`DEFAULT_POSTGRES_URL`].
pub const POSTGRES_URL_VAR: &str = "SVC_TEST_POSTGRES_URL";

/// The PostgreSQL database tests use: `$SVC_TEST_POSTGRES_URL`, or
/// [`DEFAULT_POSTGRES_URL`].
pub fn postgres_url() -> String {
    std::env::var(POSTGRES_URL_VAR).unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_owned())
}

/// A new, empty schema in a PostgreSQL database, dropped (with everything in
/// it) by [`TestSchema::remove`], or failing that when the value is dropped.
#[derive(Debug)]
pub struct TestSchema {
    base_url: String,
    name: String,
    url: String,
    removed: bool,
}

impl TestSchema {
    /// Creates a schema with a random name `t_<16 hex>` in the database at
    /// `base_url` (a `postgres://` URL).
    pub async fn create(base_url: &str) -> Result<TestSchema, StoreError> {
        sqlx::any::install_default_drivers();
        if Backend::of_url(base_url)? != Backend::Postgres {
            return Err(StoreError::Database(
                "test schemas need a postgres:// URL".into(),
            ));
        }
        let name = format!("t_{:016x}", rand::random::<u64>());
        let mut conn = AnyConnection::connect(base_url)
            .await
            .map_err(|e| context("connecting to PostgreSQL", e))?;
        conn.execute(format!("CREATE SCHEMA {name}").as_str())
            .await
            .map_err(|e| context("creating a test schema", e))?;
        let _ = conn.close().await;
        let separator = if base_url.contains('?') { '&' } else { '?' };
        // libpq syntax, so `psql` and other processes understand it too.
        let url = format!("{base_url}{separator}options=-c%20search_path%3D{name}");
        Ok(TestSchema {
            base_url: base_url.to_owned(),
            name,
            url,
            removed: false,
        })
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A URL whose connections work in this schema: for [`SqlStore::connect`]
    /// or for a server process under test.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A new store on this schema (migrated); call it again for a second
    /// store, as a second replica would have.
    pub async fn connect(&self) -> Result<SqlStore, StoreError> {
        SqlStore::connect(&self.url).await
    }

    /// Drops the schema and everything in it.
    pub async fn remove(mut self) -> Result<(), StoreError> {
        self.removed = true;
        drop_schema(&self.base_url, &self.name).await
    }
}

impl Drop for TestSchema {
    /// Drops the schema when [`TestSchema::remove`] was not called (a test
    /// that failed, say). An async runtime cannot be blocked on from inside
    /// itself, so this runs one of its own on another thread.
    #[expect(
        clippy::print_stderr,
        reason = "tests only: a schema left behind is said where the test's output goes"
    )]
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let base_url = std::mem::take(&mut self.base_url);
        let name = std::mem::take(&mut self.name);
        let worker = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let result = match runtime {
                Ok(runtime) => runtime.block_on(drop_schema(&base_url, &name)),
                Err(e) => Err(context("starting a runtime", e)),
            };
            if let Err(e) = result {
                eprintln!("could not drop test schema {name}: {e}");
            }
        });
        let _ = worker.join();
    }
}

async fn drop_schema(base_url: &str, name: &str) -> Result<(), StoreError> {
    let mut conn = AnyConnection::connect(base_url)
        .await
        .map_err(|e| context("connecting to PostgreSQL", e))?;
    // Give up rather than hang behind a transaction a failed test left open.
    conn.execute("SET lock_timeout = '10s'")
        .await
        .map_err(|e| context("dropping a test schema", e))?;
    // A server the test left running may still be writing (the usage
    // ledger, the request log at shutdown): the drop can deadlock with its
    // transaction, which PostgreSQL resolves by failing one; try again.
    let drop = format!("DROP SCHEMA IF EXISTS {name} CASCADE");
    let mut attempt = 0;
    loop {
        attempt += 1;
        match conn.execute(drop.as_str()).await {
            Ok(_) => break,
            Err(e) if attempt < 5 && e.to_string().contains("deadlock detected") => {
                tokio::time::sleep(std::time::Duration::from_millis(100 * attempt)).await;
            }
            Err(e) => return Err(context("dropping a test schema", e)),
        }
    }
    let _ = conn.close().await;
    Ok(())
}

impl SqlStore {
    /// A store on a new [`TestSchema`] of the PostgreSQL database at
    /// `base_url`; keep the schema alive as long as the store is used.
    pub async fn connect_isolated_postgres(
        base_url: &str,
    ) -> Result<(SqlStore, TestSchema), StoreError> {
        let schema = TestSchema::create(base_url).await?;
        let store = schema.connect().await?;
        Ok((store, schema))
    }
}

/// Applies to the database at `url` (a SQLite file is created) the
/// migrations numbered below `version` and no others: the schema an older
/// svc left, for rows written before a migration.
pub async fn migrate_before(url: &str, version: i64) -> Result<(), StoreError> {
    sqlx::any::install_default_drivers();
    let all = match Backend::of_url(url)? {
        Backend::Sqlite => &crate::connect::SQLITE_MIGRATIONS,
        Backend::Postgres => &crate::connect::POSTGRES_MIGRATIONS,
    };
    let older: Vec<_> = all
        .migrations
        .iter()
        .filter(|m| m.version < version)
        .cloned()
        .collect();
    let migrator = Migrator {
        migrations: std::borrow::Cow::Owned(older),
        ..Migrator::DEFAULT
    };
    let mut conn = AnyConnection::connect(url)
        .await
        .map_err(|e| context("connecting to the database", e))?;
    migrator
        .run(&mut conn)
        .await
        .map_err(|e| context("migrating the database", e))?;
    let _ = conn.close().await;
    Ok(())
}

/// Runs `sql` on a connection of its own to the database at `url`, past
/// any store: for writing rows the store would refuse to.
pub async fn execute(url: &str, sql: &str) -> Result<(), StoreError> {
    sqlx::any::install_default_drivers();
    let mut conn = AnyConnection::connect(url)
        .await
        .map_err(|e| context("connecting to the database", e))?;
    conn.execute(sql)
        .await
        .map_err(|e| context("running a test statement", e))?;
    let _ = conn.close().await;
    Ok(())
}

/// The single BIGINT that `sql` selects, read on a connection of its own
/// to the database at `url`: for checking what the store's traits cannot
/// show (how many bytes a table holds, say).
pub async fn scalar(url: &str, sql: &str) -> Result<i64, StoreError> {
    sqlx::any::install_default_drivers();
    let mut conn = AnyConnection::connect(url)
        .await
        .map_err(|e| context("connecting to the database", e))?;
    let value = sqlx::query_scalar(sql)
        .fetch_one(&mut conn)
        .await
        .map_err(|e| context("running a test query", e))?;
    let _ = conn.close().await;
    Ok(value)
}
