//! `GET /v1/models` and `GET /v1/models/{id}`, each local model with its
//! residency (loaded or not, the memory it holds); and the admin API's
//! `POST /v1/admin/models/load` and `POST /v1/admin/models/unload`, for
//! organization-wide admin keys, which the dashboard's Models page shares
//! ([`load_model`], [`unload_model`]).

use axum::Json;
use axum::extract::{Path, State};
use svc_api::{
    Model, ModelList, ModelResidenceRequest, ModelResidency, ModelUnloadRequest, UnloadedModel,
};
use svc_core::audit::{Actor, AuditEntry};
use svc_core::{Residence, Residency, Unload, ValidationError};

use super::organization::{AdminErrors, Reach, key_actor, reach};
use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::extract::{ApiJson, Key, scope};
use crate::openapi::shared;
use crate::registry::ModelRoute;
use crate::state::AppState;

/// What this endpoint is: its OpenAPI group, its paths and dialect, and
/// what batches and the response cache make of it.
pub(crate) const ENDPOINT: Endpoint = Endpoint::new(
    "models",
    "The models this server serves; each local one with its residency. Loading and unloading a local model (`/v1/admin/models/...`) is the admin API's, for an organization owner's or the operator's admin key.",
)
.paths(&["/v1/models", "/v1/admin/models"]);

crate::openapi::parameters! {
    /// The model of `GET /v1/models/{model}`.
    ModelPath {
        ("model", Path, true,
            "The model id. Ids may contain `/`; the rest of the path after `/v1/models/` is the id.",
            {"type": "string", "minLength": 1, "examples": ["svc"]}),
    }
}

/// `route` as the list shows it: with its residency when its model is a
/// local one.
fn entry(route: &ModelRoute) -> Model {
    Model {
        id: route.id.clone(),
        object: "model".into(),
        created: route.created,
        owned_by: route.owned_by.clone(),
        residency: route
            .engine
            .residence()
            .map(|residence| residency(&residence.residency())),
    }
}

/// A local model's residency as the API shows it.
fn residency(residency: &Residency) -> ModelResidency {
    ModelResidency {
        state: residency.state.as_str().to_owned(),
        memory_bytes: residency.memory_bytes,
        pinned: residency.keep_alive.is_none(),
        keep_alive_seconds: residency.keep_alive.map(|d| d.as_secs()),
    }
}

/// What an unload did, as the API says it.
pub(crate) fn unload_text(unload: Unload) -> &'static str {
    match unload {
        Unload::Unloaded => "unloaded",
        Unload::WhenIdle => "when_idle",
        Unload::NotLoaded => "not_loaded",
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

/// The served model `id` and its residence: the 404 of a model that does
/// not exist, or a 400 naming `model` for one served by an upstream (it is
/// not loaded here). Every model of the server, whatever the key's or its
/// project's model list: only organization-wide admins get here.
fn resident<'a>(
    state: &'a AppState,
    id: &str,
) -> Result<(&'a ModelRoute, &'a dyn Residence), ApiError> {
    let route = state
        .models
        .get(id)
        .ok_or_else(|| ApiError::ModelNotFound(id.to_owned()))?;
    let residence = route.engine.residence().ok_or_else(|| ValidationError {
        param: "model".into(),
        message: format!(
            "The model `{id}` is served by an upstream and is not loaded here: only local models (GGUF files this server runs) are loaded and unloaded."
        ),
    })?;
    Ok((route, residence))
}

/// Writes `kind` with `details` to the audit log, by `actor`.
async fn audit(
    state: &AppState,
    actor: &Actor,
    kind: &str,
    details: serde_json::Value,
) -> Result<(), ApiError> {
    let entry = AuditEntry::new(kind, actor, details);
    svc_core::audit::record(state.store.as_ref(), entry).await?;
    Ok(())
}

/// Loads the local model `id` now (or waits for the load under way), up to
/// its load timeout, and audits it as `model.loaded` by `actor`: the model
/// as the list shows it now. Shared by the admin API and the dashboard.
pub(crate) async fn load_model(
    state: &AppState,
    id: &str,
    actor: &Actor,
) -> Result<Model, ApiError> {
    let (route, residence) = resident(state, id)?;
    residence.load().await?;
    audit(
        state,
        actor,
        "model.loaded",
        serde_json::json!({ "id": id }),
    )
    .await?;
    Ok(entry(route))
}

/// Unloads the local model `id` (now, or when its last running request
/// ends; with `force`, now, ending its running requests) and audits it as
/// `model.unloaded` by `actor`, with what it did: the model as the list
/// shows it now, and that. Shared by the admin API and the dashboard.
pub(crate) async fn unload_model(
    state: &AppState,
    id: &str,
    force: bool,
    actor: &Actor,
) -> Result<(Model, Unload), ApiError> {
    let (route, residence) = resident(state, id)?;
    let unload = residence.unload(force);
    let mut details = serde_json::json!({ "id": id, "unload": unload_text(unload) });
    if force {
        details["force"] = serde_json::Value::Bool(true);
    }
    audit(state, actor, "model.unloaded", details).await?;
    Ok((entry(route), unload))
}

/// Organization-wide admin keys only: a model is the whole server's, not
/// a project's.
async fn organization_wide(state: &AppState, key: &svc_core::KeyRecord) -> Result<(), ApiError> {
    if reach(state, key).await? != Reach::Organization {
        return Err(ApiError::Forbidden(
            "You have insufficient permissions for this operation: loading and unloading models needs an admin key of an organization owner."
                .into(),
        ));
    }
    Ok(())
}

/// `POST /v1/admin/models/load`: answers once the model is loaded.
#[utoipa::path(post, path = "/v1/admin/models/load", tag = "models", operation_id = "loadModel",
    summary = "Load a local model now, within the memory budget (other idle models may be unloaded to make room); answers once it is loaded. An organization owner's or the operator's admin key.",
    description = "Waits for a load already under way rather than starting another, up to the model's load timeout. Audited as `model.loaded`. A model that cannot be loaded now (the memory budget is held by models in use, the file failed to load, the load timed out) is a 503 `model_unavailable` with `Retry-After`.",
    security(("bearer" = ["api.management.write"])),
    request_body = ModelResidenceRequest,
    responses(
        (status = 200, description = "The model, loaded, with its residency.", body = Model),
        (status = 400, description = "The body is not `{\"model\": \"...\"}` (`code` `invalid_json`, `param` naming the field), or the model is served by an upstream and is not loaded here (`code` `invalid_value`, `param` `model`).", body = svc_api::ErrorBody),
        (status = 404, response = shared::NotFound),
        AdminErrors,
    ))]
pub async fn load(
    Key(key, _): Key<scope::ManagementWrite>,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<ModelResidenceRequest>,
) -> Result<Json<Model>, ApiError> {
    organization_wide(&state, &key).await?;
    let actor = key_actor(&state, &key).await?;
    Ok(Json(load_model(&state, &body.model, &actor).await?))
}

/// `POST /v1/admin/models/unload`: cuts running requests only when forced.
#[utoipa::path(post, path = "/v1/admin/models/unload", tag = "models", operation_id = "unloadModel",
    summary = "Unload a local model: now when no request uses it, else when the last running one ends (none is cut), or with `force` now, ending the running ones. An organization owner's or the operator's admin key.",
    description = "A pinned model is unloaded too; a request for an unloaded model loads it again. With `\"force\": true` the requests running on it are ended with a `model_unavailable` error (a stream gets an error event). Audited as `model.unloaded`. The answer is the model with its residency as it is now, and `unload`: what was done.",
    security(("bearer" = ["api.management.write"])),
    request_body = ModelUnloadRequest,
    responses(
        (status = 200, description = "The model with its residency now, and `unload`: `unloaded`, `when_idle` or `not_loaded`.", body = UnloadedModel),
        (status = 400, description = "The body is not `{\"model\": \"...\", \"force\": false}` (`code` `invalid_json`, `param` naming the field), or the model is served by an upstream and is not loaded here (`code` `invalid_value`, `param` `model`).", body = svc_api::ErrorBody),
        (status = 404, response = shared::NotFound),
        AdminErrors,
    ))]
pub async fn unload(
    Key(key, _): Key<scope::ManagementWrite>,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<ModelUnloadRequest>,
) -> Result<Json<UnloadedModel>, ApiError> {
    organization_wide(&state, &key).await?;
    let actor = key_actor(&state, &key).await?;
    let (model, unload) = unload_model(&state, &body.model, body.force, &actor).await?;
    Ok(Json(UnloadedModel {
        model,
        unload: unload_text(unload).to_owned(),
    }))
}
