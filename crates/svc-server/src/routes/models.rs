//! `GET /v1/models` and `GET /v1/models/{id}`.

use axum::Json;
use axum::extract::{Path, State};
use svc_api::{Model, ModelList};

use crate::error::ApiError;
use crate::extract::{Key, scope};
use crate::openapi::shared;
use crate::registry::ModelRoute;
use crate::state::AppState;

crate::openapi::parameters! {
    /// The model of `GET /v1/models/{model}`.
    ModelPath {
        ("model", Path, true,
            "The model id. Ids may contain `/`; the rest of the path after `/v1/models/` is the id.",
            {"type": "string", "minLength": 1, "examples": ["svc"]}),
    }
}

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
#[utoipa::path(get, path = "/v1/models", tag = "models", operation_id = "listModels",
    summary = "List the models this server serves.",
    security(("bearer" = ["api.model.read"])),
    responses(
        (status = 200, description = "The model list, in the server's order.", body = ModelList),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 500, response = shared::InternalServerError),
    ))]
pub async fn list(
    Key(key, _): Key<scope::ModelRead>,
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

#[utoipa::path(get, path = "/v1/models/{*model}", tag = "models", operation_id = "retrieveModel",
    summary = "One model by id.",
    security(("bearer" = ["api.model.read"])),
    params(ModelPath),
    responses(
        (status = 200, description = "The model.", body = Model),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 404, response = shared::NotFound),
        (status = 500, response = shared::InternalServerError),
    ))]
pub async fn retrieve(
    Key(key, _): Key<scope::ModelRead>,
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
