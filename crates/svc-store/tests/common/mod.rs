//! A fresh database of either backend for one test.
#![allow(dead_code, reason = "each test file uses a part of it")]

use svc_core::key::{ApiKey, KeyHash, KeyId};
use svc_core::store::KeyRecord;
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
        owner_id: owner_id.map(str::to_owned),
        created_via: "cli".into(),
        created_at,
        expires_at: None,
        last_used_at: None,
        revoked_at: None,
    };
    (record, key.hash())
}
