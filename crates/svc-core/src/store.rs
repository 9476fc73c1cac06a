//! The Store boundary: narrow traits for each kind of record, combined into
//! [`Store`]. Implementations (SQLite, PostgreSQL) live in `svc-store`.

use async_trait::async_trait;
use thiserror::Error;

use crate::key::{KeyHash, KeyId};

/// A stored API key: everything but the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    pub id: KeyId,
    pub name: String,
    /// `sk-svc-1a2b…9f0e`.
    pub hint: String,
    /// The owning account, when keys belong to accounts.
    pub owner_id: Option<String>,
    /// How the key was made: `cli`, `dashboard`, `device`.
    pub created_via: String,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// A failure of the storage layer. The message is for logs, not clients.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("a record with the same unique value exists")]
    Conflict,
    #[error("database error: {0}")]
    Database(String),
}

/// Persistence of API keys.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// Stores a new key by its hash.
    async fn insert_key(&self, record: &KeyRecord, hash: &KeyHash) -> Result<(), StoreError>;
    /// The key with this hash, if any (revoked and expired ones included).
    async fn key_by_hash(&self, hash: &KeyHash) -> Result<Option<KeyRecord>, StoreError>;
    /// The key with this id, if any.
    async fn key_by_id(&self, id: &KeyId) -> Result<Option<KeyRecord>, StoreError>;
    /// Keys, newest first; only `owner_id`'s when given.
    async fn list_keys(&self, owner_id: Option<&str>) -> Result<Vec<KeyRecord>, StoreError>;
    /// Marks a key revoked at `at`; false when there is no such active key.
    async fn revoke_key(&self, id: &KeyId, at: i64) -> Result<bool, StoreError>;
    /// Records use at `at`.
    async fn touch_key(&self, id: &KeyId, at: i64) -> Result<(), StoreError>;
}

/// Whether the database answers.
#[async_trait]
pub trait HealthStore: Send + Sync {
    async fn ping(&self) -> Result<(), StoreError>;
}

/// Everything svc keeps.
pub trait Store: KeyStore + HealthStore {}

impl<T: KeyStore + HealthStore> Store for T {}
