//! Opening a [`SqlStore`]: which backend a URL names, pool settings for each,
//! SQLite's journal mode, and the migrations, which run on every connect.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::migrate::Migrator;
use sqlx::{AnyConnection, AnyPool, Connection};
use svc_core::store::StoreError;

use crate::changes::KeyChanges;
use crate::error::context;
use crate::{Backend, SqlStore};

pub(crate) static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sqlite");
pub(crate) static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/postgres");

/// The database file [`SqlStore::connect_data_dir`] keeps in its directory.
pub const SQLITE_FILE_NAME: &str = "svc.db";

/// Connections to one SQLite file. WAL lets readers run beside the single
/// writer; more connections than this only queue on SQLite's write lock.
const SQLITE_MAX_CONNECTIONS: u32 = 8;
/// Connections from one replica to PostgreSQL.
const POSTGRES_MAX_CONNECTIONS: u32 = 10;
/// How long a query waits for a free connection (or for a new one to
/// connect) before it fails. A stopped PostgreSQL refuses connections,
/// which sqlx retries until this runs out: it is what a request waits then.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest one store operation on the path of every API request
/// (authentication, readiness) may take, connection included, before the
/// request is answered 503: bounds a database that accepts connections but
/// does not answer, which the acquire timeout does not.
pub(crate) const REQUEST_PATH_TIMEOUT: Duration = Duration::from_secs(2);
/// The same bound for background writes (usage counts), which are retried.
pub(crate) const BACKGROUND_TIMEOUT: Duration = Duration::from_secs(10);
/// Tries at migrating a SQLite file while another process does too.
const MIGRATE_ATTEMPTS_SQLITE: u32 = 10;
/// Tries at switching a new SQLite file to WAL while another process does too.
const WAL_ATTEMPTS: u32 = 50;

impl SqlStore {
    /// Opens the database at `url` and brings its schema up to date.
    ///
    /// `sqlite://PATH` (the file is created when missing; SQLite's own
    /// `mode=` parameter is respected when given), `sqlite::memory:` (one
    /// connection, gone when the store is dropped), or `postgres://…`
    /// (`postgresql://` too; libpq-style parameters such as `sslmode` and
    /// `options` work). Several processes may connect to one PostgreSQL
    /// database at once: migrations run under sqlx's advisory lock.
    pub async fn connect(url: &str) -> Result<SqlStore, StoreError> {
        sqlx::any::install_default_drivers();
        match Backend::of_url(url)? {
            Backend::Sqlite => connect_sqlite(url).await,
            Backend::Postgres => connect_postgres(url).await,
        }
    }

    /// Opens (creating both when missing) `dir/svc.db`, the embedded default.
    pub async fn connect_data_dir(dir: &Path) -> Result<SqlStore, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| context("creating the data directory", e))?;
        SqlStore::connect(&SqlStore::data_dir_url(dir)?).await
    }

    /// The `sqlite://` URL of `dir/svc.db`, as [`SqlStore::connect_data_dir`]
    /// opens it: for showing, or for handing to another process.
    pub fn data_dir_url(dir: &Path) -> Result<String, StoreError> {
        let file = std::path::absolute(dir.join(SQLITE_FILE_NAME))
            .map_err(|e| context("resolving the data directory", e))?;
        let file = file.to_str().ok_or_else(|| {
            StoreError::Database("the data directory's path is not valid UTF-8".into())
        })?;
        Ok(format!("sqlite://{}?mode=rwc", escape_path(file)))
    }
}

impl Backend {
    /// The backend a database URL names, by its scheme.
    pub(crate) fn of_url(url: &str) -> Result<Backend, StoreError> {
        let scheme = url
            .split_once(':')
            .map(|(scheme, _)| scheme.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("sqlite") => Ok(Backend::Sqlite),
            Some("postgres" | "postgresql") => Ok(Backend::Postgres),
            // The URL is not echoed: it may hold a password.
            _ => Err(StoreError::Database(
                "unsupported database URL: use sqlite://PATH or postgres://USER@HOST/DATABASE"
                    .into(),
            )),
        }
    }
}

async fn connect_sqlite(url: &str) -> Result<SqlStore, StoreError> {
    let (url, in_memory) = sqlite_url_with_defaults(url);
    let options = if in_memory {
        // Every connection to `:memory:` is a database of its own: keep
        // exactly one, and never let the pool retire it.
        AnyPoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
    } else {
        // sqlx sets a 5 s busy timeout on every SQLite connection, so
        // concurrent writers wait for the lock instead of failing.
        AnyPoolOptions::new().max_connections(SQLITE_MAX_CONNECTIONS)
    };
    if !in_memory {
        let mut conn = probe(&url, "opening the SQLite database").await?;
        use_wal(&mut conn).await?;
        let _ = conn.close().await;
    }
    let pool: AnyPool = options
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect(&url)
        .await
        .map_err(|e| context("opening the SQLite database", e))?;
    migrate(&pool, &SQLITE_MIGRATIONS, MIGRATE_ATTEMPTS_SQLITE).await?;
    let key_changes = if in_memory {
        KeyChanges::local()
    } else {
        // The file as SQLite resolved it, whatever form the URL took.
        let file: String =
            sqlx::query_scalar("SELECT file FROM pragma_database_list WHERE name = 'main'")
                .fetch_one(&pool)
                .await
                .map_err(|e| context("reading the SQLite file's path", e))?;
        KeyChanges::file(file.into())
    };
    Ok(SqlStore {
        pool,
        backend: Backend::Sqlite,
        key_changes: Arc::new(key_changes),
    })
}

async fn connect_postgres(url: &str) -> Result<SqlStore, StoreError> {
    let _ = probe(url, "connecting to PostgreSQL").await?.close().await;
    let pool: AnyPool = AnyPoolOptions::new()
        .max_connections(POSTGRES_MAX_CONNECTIONS)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect(url)
        .await
        .map_err(|e| context("connecting to PostgreSQL", e))?;
    migrate(&pool, &POSTGRES_MIGRATIONS, 1).await?;
    Ok(SqlStore {
        pool,
        backend: Backend::Postgres,
        key_changes: Arc::new(KeyChanges::listen(url)),
    })
}

/// One connection outside any pool. A wrong host, password or path then
/// fails at once with its cause, which a pool would retry until its timeout
/// and report only as "pool timed out".
async fn probe(url: &str, what: &str) -> Result<AnyConnection, StoreError> {
    AnyConnection::connect(url)
        .await
        .map_err(|e| context(what, e))
}

/// Applies the migrations not yet applied, trying up to `attempts` times.
///
/// On PostgreSQL sqlx holds an advisory lock meanwhile, so replicas starting
/// together take turns. SQLite has no such lock: of two processes migrating
/// one new file at the same moment, one fails (each migration is a
/// transaction, so nothing is half done), and its next try finds the other's
/// work applied.
async fn migrate(pool: &AnyPool, migrator: &Migrator, attempts: u32) -> Result<(), StoreError> {
    let mut attempt = 1;
    loop {
        // Through the pool: running on a `&mut` connection would make the
        // future of `connect` not `Send` (sqlx's `Acquire` is not general enough).
        match migrator.run(pool).await {
            Ok(()) => return Ok(()),
            Err(_) if attempt < attempts => {
                tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
                attempt += 1;
            }
            Err(e) => {
                // A failed run can return without releasing PostgreSQL's
                // session-level lock, on a connection that went back to the
                // pool: close them all.
                pool.close().await;
                return Err(context("migrating the database", e));
            }
        }
    }
}

/// Puts the SQLite file in WAL mode, which it then keeps. Switching needs a
/// lock that the busy timeout does not wait for, so a process that opens a
/// new file at the same time as another retries.
async fn use_wal(conn: &mut AnyConnection) -> Result<(), StoreError> {
    let current: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| context("reading SQLite's journal mode", e))?;
    if current.eq_ignore_ascii_case("wal") {
        return Ok(());
    }
    let mut attempt = 1;
    loop {
        let set = sqlx::query_scalar::<_, String>("PRAGMA journal_mode = WAL")
            .fetch_one(&mut *conn)
            .await;
        match set {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => {
                return Err(StoreError::Database(format!(
                    "SQLite kept the {mode} journal mode instead of WAL"
                )));
            }
            Err(e) if attempt < WAL_ATTEMPTS && is_busy(&e) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(context("switching SQLite to WAL", e)),
        }
    }
}

/// SQLITE_BUSY or SQLITE_LOCKED, extended codes included.
fn is_busy(error: &sqlx::Error) -> bool {
    let code = match error {
        sqlx::Error::Database(e) => e.code().and_then(|c| c.parse::<i32>().ok()),
        _ => None,
    };
    code.is_some_and(|c| matches!(c & 0xff, 5 | 6))
}

/// `url` with `mode=rwc` added unless it names a mode, and whether it is an
/// in-memory database.
fn sqlite_url_with_defaults(url: &str) -> (String, bool) {
    let (location, query) = match url.split_once('?') {
        Some((location, query)) => (location, Some(query)),
        None => (url, None),
    };
    let mode = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("mode="));
    let in_memory = location.ends_with(":memory:") || mode == Some("memory");
    if in_memory || mode.is_some() {
        (url.to_owned(), in_memory)
    } else {
        let separator = if query.is_some() { '&' } else { '?' };
        (format!("{url}{separator}mode=rwc"), false)
    }
}

/// Percent-encodes what would end or alter a URL's path; sqlx decodes it.
fn escape_path(path: &str) -> String {
    let mut escaped = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            '%' | '?' | '#' | ' ' => escaped.push_str(&format!("%{:02X}", c as u32)),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_is_chosen_by_scheme() {
        assert_eq!(Backend::of_url("sqlite://a.db").ok(), Some(Backend::Sqlite));
        assert_eq!(
            Backend::of_url("sqlite::memory:").ok(),
            Some(Backend::Sqlite)
        );
        assert_eq!(
            Backend::of_url("postgres://u@h/d").ok(),
            Some(Backend::Postgres)
        );
        assert_eq!(
            Backend::of_url("PostgreSQL://u@h/d").ok(),
            Some(Backend::Postgres)
        );
        let err = Backend::of_url("mysql://u:hunter2@h/d").unwrap_err();
        assert!(!err.to_string().contains("hunter2"));
    }

    #[test]
    fn sqlite_files_are_created_unless_a_mode_is_given() {
        let with = |url| sqlite_url_with_defaults(url);
        assert_eq!(
            with("sqlite://a.db"),
            ("sqlite://a.db?mode=rwc".into(), false)
        );
        assert_eq!(
            with("sqlite://a.db?cache=shared"),
            ("sqlite://a.db?cache=shared&mode=rwc".into(), false)
        );
        assert_eq!(
            with("sqlite://a.db?mode=ro"),
            ("sqlite://a.db?mode=ro".into(), false)
        );
        assert_eq!(with("sqlite::memory:"), ("sqlite::memory:".into(), true));
        assert_eq!(
            with("sqlite://?mode=memory"),
            ("sqlite://?mode=memory".into(), true)
        );
    }

    #[test]
    fn data_dir_urls_escape_the_path() {
        let url = SqlStore::data_dir_url(Path::new("/srv/a b?#%/x")).unwrap();
        assert_eq!(url, "sqlite:///srv/a%20b%3F%23%25/x/svc.db?mode=rwc");
    }
}
