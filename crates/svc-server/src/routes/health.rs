//! `GET /health` (the process answers) and `GET /ready` (and its store does).

use axum::Json;
use axum::extract::State;
use svc_api::{HealthStatus, ReadyStatus};

use crate::error::ApiError;
use crate::state::AppState;

pub async fn health() -> Json<HealthStatus> {
    Json(HealthStatus::ok())
}

pub async fn ready(State(state): State<AppState>) -> Result<Json<ReadyStatus>, ApiError> {
    state.store.ping().await.map_err(|e| {
        tracing::warn!(error = %e, "readiness check failed");
        ApiError::Unavailable
    })?;
    Ok(Json(ReadyStatus::ready()))
}
