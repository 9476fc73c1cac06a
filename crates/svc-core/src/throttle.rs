//! Fixed-window throttling on top of [`ThrottleStore`](crate::store::ThrottleStore),
//! so every replica sharing the database counts the same attempts.

use std::sync::Arc;

use crate::account::SignInError;
use crate::now;
use crate::store::{Store, StoreError};

/// At most `limit` failures per `window` seconds for each key of one scope
/// (an account, an address).
#[derive(Clone)]
pub struct Throttle {
    store: Arc<dyn Store>,
    scope: &'static str,
    limit: i64,
    window: i64,
}

/// The caller must wait `retry_after` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    pub retry_after: i64,
}

impl Throttle {
    pub fn new(store: Arc<dyn Store>, scope: &'static str, limit: i64, window: i64) -> Self {
        Throttle {
            store,
            scope,
            limit,
            window,
        }
    }

    fn bucket(&self, key: &str) -> String {
        format!("{}:{key}", self.scope)
    }

    fn window_start(&self, at: i64) -> i64 {
        at - at.rem_euclid(self.window)
    }

    /// `Err(Throttled)` when `key` has used up its failures in this window.
    pub async fn check(&self, key: &str) -> Result<Result<(), Throttled>, StoreError> {
        let at = now();
        let start = self.window_start(at);
        let hits = self.store.hits(&self.bucket(key), start).await?;
        Ok(if hits >= self.limit {
            Err(Throttled {
                retry_after: (start + self.window - at).max(1),
            })
        } else {
            Ok(())
        })
    }

    /// Counts a failure for `key`.
    pub async fn fail(&self, key: &str) -> Result<(), StoreError> {
        let start = self.window_start(now());
        self.store.hit(&self.bucket(key), start).await.map(|_| ())
    }

    /// Forgets `key`'s failures.
    pub async fn clear(&self, key: &str) -> Result<(), StoreError> {
        self.store.clear(&self.bucket(key)).await
    }
}

impl From<Throttled> for SignInError {
    fn from(t: Throttled) -> Self {
        SignInError::Throttled {
            retry_after: t.retry_after,
        }
    }
}
