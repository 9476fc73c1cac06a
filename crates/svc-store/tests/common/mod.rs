//! A fresh database of either backend for one test.
#![expect(dead_code, reason = "each test file uses a part of it")]

use sqlx::{AnyConnection, Connection};
use svc_core::device::{DeviceRecord, DeviceState};
use svc_core::hashes::DeviceCodeHash;
use svc_core::ids::{KeyId, ProjectId, UserId};
use svc_core::key::{ApiKey, KeyHash, KeyOrigin, KeyRecord};
use svc_core::project::{KeyKind, McpServerAccess, ModelAccess};
use svc_core::user::UserRecord;
use svc_store::SqlStore;
use svc_store::testing::{self, TestSchema};

/// An empty, unmigrated database: a SQLite file in a temporary directory, or
/// a schema of its own in the test PostgreSQL database.
pub enum Db {
    Sqlite {
        _dir: tempfile::TempDir,
        url: String,
    },
    Postgres(TestSchema),
}

impl Db {
    pub fn sqlite() -> Db {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("svc.db").display());
        Db::Sqlite { _dir: dir, url }
    }

    /// Fails, never skips, when PostgreSQL is unreachable: CI always has it.
    pub async fn postgres() -> Db {
        let url = testing::postgres_url();
        let schema = TestSchema::create(&url).await.unwrap_or_else(|e| {
            panic!(
                "PostgreSQL at {url} must be reachable for these tests (set {}): {e}",
                testing::POSTGRES_URL_VAR
            )
        });
        Db::Postgres(schema)
    }

    pub fn url(&self) -> &str {
        match self {
            Db::Sqlite { url, .. } => url,
            Db::Postgres(schema) => schema.url(),
        }
    }

    /// A new store on this database, as another replica would open it.
    pub async fn store(&self) -> SqlStore {
        SqlStore::connect(self.url()).await.unwrap()
    }

    /// The single BIGINT that `sql` selects, read on a connection of its own,
    /// past the store: for checking what the traits cannot show.
    pub async fn scalar(&self, sql: &str) -> i64 {
        sqlx::any::install_default_drivers();
        let mut conn = AnyConnection::connect(self.url()).await.unwrap();
        let value = sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap();
        conn.close().await.unwrap();
        value
    }

    /// Runs `sql` on a connection of its own, past the store: for writing
    /// rows the traits would refuse to.
    pub async fn execute(&self, sql: &str) {
        sqlx::any::install_default_drivers();
        let mut conn = AnyConnection::connect(self.url()).await.unwrap();
        sqlx::query(sql).execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    }

    /// A connection that may create the database (a SQLite file), past the
    /// store, with the migrations before `version` applied: the schema an
    /// older svc left.
    pub async fn migrated_before(&self, version: i64) -> AnyConnection {
        sqlx::any::install_default_drivers();
        let (dir, url) = match self {
            Db::Sqlite { url, .. } => ("sqlite", format!("{url}?mode=rwc")),
            Db::Postgres(schema) => ("postgres", schema.url().to_owned()),
        };
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(dir);
        let mut migrator = sqlx::migrate::Migrator::new(path).await.unwrap();
        let old: Vec<_> = migrator
            .migrations
            .iter()
            .filter(|m| m.version < version)
            .cloned()
            .collect();
        assert_eq!(old.len() as i64, version - 1, "0001 to {}", version - 1);
        migrator.migrations = std::borrow::Cow::Owned(old);
        let mut conn = AnyConnection::connect(&url).await.unwrap();
        migrator.run(&mut conn).await.unwrap();
        conn
    }

    pub async fn finish(self) {
        if let Db::Postgres(schema) = self {
            schema.remove().await.unwrap();
        }
    }
}

/// Runs each `async fn name(db: &Db)` once on SQLite and once on PostgreSQL.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = $crate::common::Db::sqlite();
                    super::$name(&db).await;
                    db.finish().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = $crate::common::Db::postgres().await;
                    super::$name(&db).await;
                    db.finish().await;
                }
            )*
        }
    };
}

/// A key record with a fresh id and secret, created at `created_at`.
pub fn new_key(owner_id: Option<&str>, created_at: i64) -> (KeyRecord, KeyHash) {
    let key = ApiKey::generate();
    let record = KeyRecord {
        id: KeyId::generate(),
        name: format!("key made at {created_at}"),
        hint: key.hint(),
        owner_id: owner_id.map(|id| UserId(id.to_owned())),
        created_via: KeyOrigin::Cli,
        created_at,
        expires_at: None,
        last_used_at: None,
        revoked_at: None,
        limits: Default::default(),
        owner_disabled_at: None,
        project_id: ProjectId::default_project(),
        kind: KeyKind::All,
        allowed_models: ModelAccess::any(),
        project_allowed_models: ModelAccess::any(),
        allowed_mcp_servers: McpServerAccess::any(),
        project_allowed_mcp_servers: McpServerAccess::any(),
        budget: None,
        project_budget: None,
        rotated_from: None,
        lineage: None,
    };
    (record, key.hash())
}

/// A non-admin user with a fresh id, created at `created_at`.
pub fn new_user(email: &str, created_at: i64) -> UserRecord {
    UserRecord {
        id: UserId::generate(),
        email: email.to_owned(),
        password_hash: format!("$argon2id$v=19$m=19456,t=2,p=1$c2FsdA${email}"),
        is_admin: false,
        created_at,
        disabled_at: None,
    }
}

/// Random lowercase hex of `bytes` bytes.
pub fn random_hex(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

/// A pending authorization with fresh id and codes, never polled.
pub fn new_device(created_at: i64, expires_at: i64) -> DeviceRecord {
    DeviceRecord {
        id: format!("dev_{}", random_hex(8)),
        device_code_hash: DeviceCodeHash::from_stored(random_hex(32)),
        user_code_hash: svc_core::device::UserCode::generate().hash(),
        client_id: None,
        scope: None,
        client_address: None,
        user_agent: None,
        created_at,
        expires_at,
        interval: 5,
        last_polled_at_ms: None,
        state: DeviceState::Pending,
    }
}

/// Runs `count` futures made by `make` concurrently on their own tasks.
pub async fn join_all<F, T>(count: usize, make: impl Fn(usize) -> F) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let tasks: Vec<_> = (0..count).map(|n| tokio::spawn(make(n))).collect();
    let mut results = Vec::with_capacity(count);
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}
