//! `GET /v1/models` and `GET /v1/models/{id}`.

use axum::Json;
use axum::extract::{Path, State};
use svc_api::{Model, ModelList};

use crate::error::ApiError;
use crate::extract::Authenticated;
use crate::registry::ModelRoute;
use crate::state::AppState;

fn entry(route: &ModelRoute) -> Model {
    Model {
        id: route.id.clone(),
        object: "model".into(),
        created: route.created,
        owned_by: route.owned_by.clone(),
    }
}

/// The models the key may use (its own list and its project's): the others
/// are not listed, and reading one is the 404 of a model that does not exist.
pub async fn list(
    Authenticated(key): Authenticated,
    State(state): State<AppState>,
) -> Json<ModelList> {
    Json(ModelList {
        object: "list".into(),
        data: state
            .models
            .iter()
            .filter(|route| key.may_use(&route.id))
            .map(entry)
            .collect(),
    })
}

pub async fn retrieve(
    Authenticated(key): Authenticated,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Model>, ApiError> {
    state
        .models
        .get(&id)
        .filter(|route| key.may_use(&route.id))
        .map(|route| Json(entry(route)))
        .ok_or(ApiError::ModelNotFound(id))
}
