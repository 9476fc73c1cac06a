//! The Store boundary: [`Store`], everything svc keeps, as the union of the
//! narrow traits each aggregate defines beside its records ([`KeyStore`]
//! in `key`, [`UserStore`] in `user`, ...). Implementations (SQLite,
//! PostgreSQL) live in `svc-store` and implement the narrow traits; the
//! services take only the ones they use. The narrow traits and the
//! storage errors are re-exported here, the one list of what a store
//! implements.

use async_trait::async_trait;

use crate::account::AccountServiceStore;
use crate::device::DeviceServiceStore;
use crate::keys::KeyServiceStore;
use crate::projects::ProjectServiceStore;

pub use crate::audit::AuditStore;
pub use crate::batch::BatchStore;
pub use crate::budget::BudgetStore;
pub use crate::conversation::ResponseStore;
pub use crate::device::DeviceStore;
pub use crate::error::{StoreError, UnknownValue};
pub use crate::key::KeyStore;
pub use crate::project::ProjectStore;
pub use crate::request_log::RequestLogStore;
pub use crate::response_cache::ResponseCacheStore;
pub use crate::session::SessionStore;
pub use crate::throttle::ThrottleStore;
pub use crate::usage::UsageStore;
pub use crate::user::UserStore;

/// Whether the database answers.
#[async_trait]
pub trait HealthStore: Send + Sync {
    async fn ping(&self) -> Result<(), StoreError>;
}

/// Everything svc keeps: every narrow trait, and so what each service
/// takes (a `Store` turns into any of them: `Arc<dyn Store>` coerces to
/// `Arc<dyn KeyServiceStore>`, `Arc<dyn ThrottleStore>`, ...).
pub trait Store:
    KeyStore
    + ProjectStore
    + UserStore
    + SessionStore
    + DeviceStore
    + UsageStore
    + ThrottleStore
    + BudgetStore
    + ResponseStore
    + AuditStore
    + RequestLogStore
    + ResponseCacheStore
    + BatchStore
    + HealthStore
    + KeyServiceStore
    + AccountServiceStore
    + DeviceServiceStore
    + ProjectServiceStore
{
}

impl<T> Store for T where
    T: KeyStore
        + ProjectStore
        + UserStore
        + SessionStore
        + DeviceStore
        + UsageStore
        + ThrottleStore
        + BudgetStore
        + ResponseStore
        + AuditStore
        + RequestLogStore
        + ResponseCacheStore
        + BatchStore
        + HealthStore
{
}
