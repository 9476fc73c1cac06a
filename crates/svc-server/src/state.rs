//! Shared state of the axum app.

use std::sync::Arc;

use axum::extract::FromRef;
use svc_core::{KeyService, Store};

use crate::registry::ModelRegistry;

/// What every handler may reach.
#[derive(Clone, FromRef)]
pub struct AppState {
    /// Persistence, for readiness checks.
    pub store: Arc<dyn Store>,
    /// API key creation and authentication.
    pub keys: KeyService,
    /// Model ids and the engines that serve them.
    pub models: Arc<ModelRegistry>,
    /// The public base URL (no trailing slash, no `/v1`).
    pub public_url: Arc<str>,
}
