//! `GET /v1/auth/key` describes the key the request presents (and whose it
//! is); `DELETE /v1/auth/key` revokes it. For clients that hold one key and
//! want to say who they are logged in as, or log out (`svc whoami`,
//! `svc logout`).

use axum::Json;
use axum::extract::State;
use svc_api::{KeyInfo, KeyOwner, RevokedKey};
use svc_core::KeyRecord;

use crate::error::ApiError;
use crate::extract::Authenticated;
use crate::state::AppState;

async fn describe(state: &AppState, key: &KeyRecord) -> Result<KeyInfo, ApiError> {
    let owner = match &key.owner_id {
        Some(id) => state.accounts.user(id).await?.map(|u| KeyOwner {
            id: u.id.0,
            email: u.email,
        }),
        None => None,
    };
    Ok(KeyInfo {
        object: "api_key".into(),
        id: key.id.0.clone(),
        name: key.name.clone(),
        hint: key.hint.clone(),
        created_via: key.created_via.as_str().to_owned(),
        created_at: key.created_at,
        expires_at: key.expires_at,
        owner,
    })
}

pub async fn current(
    State(state): State<AppState>,
    Authenticated(key): Authenticated,
) -> Result<Json<KeyInfo>, ApiError> {
    Ok(Json(describe(&state, &key).await?))
}

pub async fn revoke(
    State(state): State<AppState>,
    Authenticated(key): Authenticated,
) -> Result<Json<RevokedKey>, ApiError> {
    let actor = super::organization::key_actor(&state, &key).await?;
    state.keys.revoke(&key.id, &actor).await?;
    Ok(Json(RevokedKey::new(key.id.0)))
}
