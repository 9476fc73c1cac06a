//! `GET /v1/auth/key` describes the key the request presents (and whose it
//! is); `DELETE /v1/auth/key` revokes it. For clients that hold one key and
//! want to say who they are logged in as, or log out (`svc whoami`,
//! `svc logout`).

use axum::Json;
use axum::extract::State;
use svc_api::{KeyInfo, KeyOwner, RevokedKey};
use svc_core::KeyRecord;

use crate::error::ApiError;
use crate::extract::{Key, scope};
use crate::openapi::shared;
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

#[utoipa::path(get, path = "/v1/auth/key", tag = "auth", operation_id = "getCurrentKey",
    summary = "Describe the presented key and its owner (who a client is logged in as).",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The key (never its secret).", body = KeyInfo),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 500, response = shared::InternalServerError),
    ))]
pub async fn current(
    State(state): State<AppState>,
    Key(key, _): Key<scope::AnyKey>,
) -> Result<Json<KeyInfo>, ApiError> {
    Ok(Json(describe(&state, &key).await?))
}

#[utoipa::path(delete, path = "/v1/auth/key", tag = "auth", operation_id = "revokeCurrentKey",
    summary = "Revoke the presented key (log out). The next request with it gets 401.",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Revoked.", body = RevokedKey),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 500, response = shared::InternalServerError),
    ))]
pub async fn revoke(
    State(state): State<AppState>,
    Key(key, _): Key<scope::AnyKey>,
) -> Result<Json<RevokedKey>, ApiError> {
    let actor = super::organization::key_actor(&state, &key).await?;
    state.keys.revoke(&key.id, &actor).await?;
    Ok(Json(RevokedKey::new(key.id.0)))
}
