//! `GET /health` (the process answers) and `GET /ready` (and its store does).

use axum::Json;
use axum::extract::State;
use svc_api::{HealthStatus, ReadyStatus};

use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::openapi::shared;
use crate::state::AppState;

/// What this endpoint is: its OpenAPI group, its paths and dialect, and
/// what batches and the response cache make of it.
pub(crate) const ENDPOINT: Endpoint = Endpoint::new("meta", "Health, readiness and this document.");

#[utoipa::path(get, path = "/health", tag = "meta", operation_id = "health",
    summary = "Liveness: the process answers.",
    responses((status = 200, description = "The process is up.", body = HealthStatus)))]
pub async fn health() -> Json<HealthStatus> {
    Json(HealthStatus::ok())
}

#[utoipa::path(get, path = "/ready", tag = "meta", operation_id = "ready",
    summary = "Readiness: the process answers and its store is reachable.",
    responses(
        (status = 200, description = "Ready to serve.", body = ReadyStatus),
        (status = 503, response = shared::ServiceUnavailable),
    ))]
pub async fn ready(State(state): State<AppState>) -> Result<Json<ReadyStatus>, ApiError> {
    state.store.ping().await.map_err(|e| {
        tracing::warn!(error = %e, "readiness check failed");
        ApiError::Unavailable
    })?;
    Ok(Json(ReadyStatus::ready()))
}
