//! Stored Responses API responses: where they go and how much of them
//! there may be, which the state holds. What is done with them (a
//! continuation's prompt, the quota's check, a turn kept) is the
//! Responses API's own: `crate::responses::conversations`.

use std::sync::Arc;
use std::time::Duration;

use svc_core::{StorageQuota, Store};
use tokio::sync::Semaphore;

/// Where stored responses go, and how much of them there may be.
pub struct Conversations {
    pub(crate) store: Arc<dyn Store>,
    /// How long a stored response is served.
    pub(crate) retention: Duration,
    /// What one project may keep.
    pub(crate) quota: StorageQuota,
    /// Continuations reading and parsing a conversation at once. Each
    /// holds at most the Responses API's bound of stored text and what it
    /// parses into; parsing is CPU work, so more at once than cores would
    /// not be faster, only hold more memory.
    pub(crate) reads: Semaphore,
}

impl Conversations {
    pub fn new(store: Arc<dyn Store>, retention: Duration, quota: StorageQuota) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Conversations {
            store,
            retention,
            quota,
            reads: Semaphore::new(cores),
        }
    }
}
