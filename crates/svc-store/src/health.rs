//! [`HealthStore`] on SQL: a round trip to the database.

use async_trait::async_trait;
use svc_core::store::{HealthStore, StoreError};

use crate::SqlStore;
use crate::connect::REQUEST_PATH_TIMEOUT;
use crate::error::{bounded, query_error};

#[async_trait]
impl HealthStore for SqlStore {
    async fn ping(&self) -> Result<(), StoreError> {
        let select = sqlx::query("SELECT 1").execute(&self.pool);
        bounded(REQUEST_PATH_TIMEOUT, async {
            select.await.map(|_| ()).map_err(query_error)
        })
        .await
    }
}
