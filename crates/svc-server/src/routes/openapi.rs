//! `GET /openapi.json`: the generated OpenAPI 3.1 document
//! ([`crate::openapi`]), with the server address filled in from the public
//! URL.

use axum::Json;
use axum::extract::State;
use serde_json::Value;

use crate::error::ApiError;
use crate::state::AppState;

crate::openapi::json_schemas! {
    /// An OpenAPI document: `openapi`, `info` and `paths`, at least.
    Document = {"type": "object", "required": ["openapi", "info", "paths"]};
}

#[utoipa::path(get, path = "/openapi.json", tag = "meta", operation_id = "openapi",
    summary = "This document, with `servers` set to the server's public URL.",
    responses((status = 200, description = "The OpenAPI 3.1 document.", body = inline(Document))))]
pub async fn document(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let mut doc = crate::openapi::document()
        .map_err(|e| ApiError::Internal(format!("the OpenAPI document: {e}")))?
        .clone();
    doc["servers"] = serde_json::json!([{"url": &*state.public_url}]);
    Ok(Json(doc))
}
