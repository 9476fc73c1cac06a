//! The OpenAPI 3.1 document: the operations the routes declare, in the
//! frame of [`crate::openapi`]; and `GET /openapi.json`, which serves it
//! with the server address filled in from the public URL.

use std::sync::LazyLock;

use axum::Json;
use axum::extract::State;
use serde_json::Value;
use utoipa::openapi::OpenApi;

use crate::error::ApiError;
use crate::state::AppState;

crate::openapi::json_schemas! {
    /// An OpenAPI document: `openapi`, `info` and `paths`, at least.
    Document = {"type": "object", "required": ["openapi", "info", "paths"]};
}

/// The document as JSON, built once; `servers` holds a placeholder that
/// `GET /openapi.json` replaces with the public URL. An error (a document
/// that does not serialize) is the route's logged 500, never a `null`.
pub fn document() -> Result<&'static Value, &'static str> {
    static DOCUMENT: LazyLock<Result<Value, String>> =
        LazyLock::new(|| serde_json::to_value(whole()).map_err(|e| e.to_string()));
    DOCUMENT.as_ref().map_err(String::as_str)
}

/// The whole document: every route's operation, `/metrics` included.
fn whole() -> OpenApi {
    let (_, api) = super::api().split_for_parts();
    let (_, metrics) = super::metrics().split_for_parts();
    crate::openapi::framed(api, metrics)
}

#[utoipa::path(get, path = "/openapi.json", tag = "meta", operation_id = "openapi",
    summary = "This document, with `servers` set to the server's public URL.",
    responses((status = 200, description = "The OpenAPI 3.1 document.", body = inline(Document))))]
pub async fn serve(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let mut doc = document()
        .map_err(|e| ApiError::Internal(format!("the OpenAPI document: {e}")))?
        .clone();
    doc["servers"] = serde_json::json!([{"url": &*state.public_url}]);
    Ok(Json(doc))
}
