//! [`HealthStore`] on SQL: a round trip to the database.

use async_trait::async_trait;
use svc_core::store::{HealthStore, StoreError};

use crate::SqlStore;
use crate::error::query_error;

#[async_trait]
impl HealthStore for SqlStore {
    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(query_error)
    }
}
