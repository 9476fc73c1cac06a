//! `GET /v1/auth/key` describes the key the request presents (and whose it
//! is); `DELETE /v1/auth/key` revokes it. For clients that hold one key and
//! want to say who they are logged in as, or log out (`svc whoami`,
//! `svc logout`).

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use svc_core::KeyRecord;

use crate::error::ApiError;
use crate::extract::Authenticated;
use crate::state::AppState;

async fn describe(state: &AppState, key: &KeyRecord) -> Result<Value, ApiError> {
    let owner = match &key.owner_id {
        Some(id) => state
            .accounts
            .user(id)
            .await?
            .map(|u| json!({"id": u.id.0, "email": u.email})),
        None => None,
    };
    Ok(json!({
        "object": "api_key",
        "id": key.id.0,
        "name": key.name,
        "hint": key.hint,
        "created_via": key.created_via,
        "created_at": key.created_at,
        "expires_at": key.expires_at,
        "owner": owner,
    }))
}

pub async fn current(
    State(state): State<AppState>,
    Authenticated(key): Authenticated,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(describe(&state, &key).await?))
}

pub async fn revoke(
    State(state): State<AppState>,
    Authenticated(key): Authenticated,
) -> Result<Json<Value>, ApiError> {
    state.keys.revoke(&key.id).await?;
    Ok(Json(
        json!({"object": "api_key", "id": key.id.0, "revoked": true}),
    ))
}
