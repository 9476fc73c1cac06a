//! Opening stores: URLs, data directories, SQLite's settings, test schemas.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use common::new_key;
use sqlx::{AnyConnection, Connection};
use svc_core::store::{HealthStore, KeyStore};
use svc_store::SqlStore;
use svc_store::testing::{self, TestSchema};

#[tokio::test]
async fn data_dir_store_creates_the_directory_and_uses_wal() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("not yet/there");
    let store = SqlStore::connect_data_dir(&data).await.unwrap();
    assert_eq!(store.backend(), "sqlite");
    let (record, hash) = new_key(None, 1);
    store.insert_key(&record, &hash).await.unwrap();
    assert!(data.join("svc.db").is_file());
    // The WAL file exists while a connection in WAL mode is open.
    assert!(data.join("svc.db-wal").is_file());
    store.close().await;

    let again = SqlStore::connect_data_dir(&data).await.unwrap();
    assert_eq!(again.key_by_hash(&hash).await.unwrap(), Some(record));
}

#[tokio::test]
async fn in_memory_sqlite_keeps_its_data_across_calls() {
    let store = SqlStore::connect("sqlite::memory:").await.unwrap();
    let (record, hash) = new_key(None, 1);
    store.insert_key(&record, &hash).await.unwrap();
    store.ping().await.unwrap();
    assert_eq!(store.key_by_hash(&hash).await.unwrap(), Some(record));
}

#[tokio::test]
async fn unsupported_and_unreachable_urls_fail_without_echoing_secrets() {
    let err = SqlStore::connect("mysql://root:hunter2@localhost/db")
        .await
        .unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
    let err = SqlStore::connect("postgres://svc:hunter2@127.0.0.1:1/db")
        .await
        .unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
    // The cause, at once: not the pool's "timed out" after its retries.
    assert!(err.to_string().contains("refused"), "{err}");
    let err = SqlStore::connect("sqlite:///nonexistent-dir/x/svc.db")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unable to open"), "{err}");
}

#[tokio::test]
async fn debug_never_shows_the_url() {
    // Trust authentication accepts any password.
    let schema = TestSchema::create(&testing::postgres_url()).await.unwrap();
    let url = schema
        .url()
        .replacen("postgres://postgres@", "postgres://postgres:hunter2@", 1);
    let store = SqlStore::connect(&url).await.unwrap();
    let shown = format!("{store:?}");
    assert!(
        !shown.contains("hunter2") && shown.contains("postgres"),
        "{shown}"
    );
    store.close().await;
    schema.remove().await.unwrap();
}

#[tokio::test]
async fn test_schemas_are_isolated_and_dropped() {
    let base = testing::postgres_url();
    let (a, schema_a) = SqlStore::connect_isolated_postgres(&base).await.unwrap();
    let (b, schema_b) = SqlStore::connect_isolated_postgres(&base).await.unwrap();
    assert_ne!(schema_a.name(), schema_b.name());
    let (record, hash) = new_key(None, 1);
    a.insert_key(&record, &hash).await.unwrap();
    assert_eq!(b.key_by_hash(&hash).await.unwrap(), None);
    assert_eq!(b.list_keys(None).await.unwrap(), vec![]);

    let (name_a, name_b) = (schema_a.name().to_owned(), schema_b.name().to_owned());
    a.close().await;
    b.close().await;
    schema_a.remove().await.unwrap();
    // Dropped without `remove`, as when a test panics.
    drop(schema_b);
    assert!(!schema_exists(&base, &name_a).await);
    assert!(!schema_exists(&base, &name_b).await);
}

async fn schema_exists(base_url: &str, name: &str) -> bool {
    let mut conn = AnyConnection::connect(base_url).await.unwrap();
    let count: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1",
    )
    .bind(name)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    count == 1
}
