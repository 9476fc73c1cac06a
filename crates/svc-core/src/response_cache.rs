//! The response cache's persistence (issue 34): whole replies of
//! reproducible requests, by a key the server derives (a hash of the
//! model's identity, the key's project, the route and the request), each
//! with the time it expires. The server keeps them in Redis when it has
//! one, else here, in the store, bounded in bytes by the sweep.

use async_trait::async_trait;

use crate::error::StoreError;

/// One reply to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    pub key: String,
    pub value: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
}

/// The response cache's table.
#[async_trait]
pub trait ResponseCacheStore: Send + Sync {
    /// The entry under `key`, unless it expired by `now_ms`.
    async fn cached_response(&self, key: &str, now_ms: i64) -> Result<Option<String>, StoreError>;
    /// Keeps each entry's value under its key until it expires (replacing
    /// one there), all or none.
    async fn cache_responses(&self, entries: &[CacheEntry]) -> Result<(), StoreError>;
    /// Deletes the entries expired by `now_ms`, then the oldest until the
    /// rest hold at most `max_bytes`; how many were deleted.
    async fn sweep_response_cache(&self, now_ms: i64, max_bytes: u64) -> Result<u64, StoreError>;
}
