//! `GET /openapi.json`: the generated OpenAPI 3.1 document
//! ([`crate::openapi`]), with the server address filled in from the public
//! URL.

use axum::Json;
use axum::extract::State;
use serde_json::Value;

use crate::state::AppState;

pub async fn document(State(state): State<AppState>) -> Json<Value> {
    let mut doc = crate::openapi::document().clone();
    doc["servers"] = serde_json::json!([{"url": &*state.public_url}]);
    Json(doc)
}
