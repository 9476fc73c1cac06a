//! The response cache's persistence (issue 34): whole replies of
//! reproducible requests, by a key the server derives (a hash of the
//! model's identity, the key's project, the route and the request), each
//! with the time it expires. The server keeps them in Redis when it has
//! one, else here, in the store, bounded in bytes by the sweep.

use async_trait::async_trait;

use crate::error::StoreError;

/// The response cache's table.
#[async_trait]
pub trait ResponseCacheStore: Send + Sync {
    /// The entry under `key`, unless it expired by `now_ms`.
    async fn cached_response(&self, key: &str, now_ms: i64) -> Result<Option<String>, StoreError>;
    /// Keeps `value` under `key` until `expires_at_ms` (replacing one there).
    async fn cache_response(
        &self,
        key: &str,
        value: &str,
        now_ms: i64,
        expires_at_ms: i64,
    ) -> Result<(), StoreError>;
    /// Deletes the entries expired by `now_ms`, then the oldest until the
    /// rest hold at most `max_bytes`; how many were deleted.
    async fn sweep_response_cache(&self, now_ms: i64, max_bytes: u64) -> Result<u64, StoreError>;
}
