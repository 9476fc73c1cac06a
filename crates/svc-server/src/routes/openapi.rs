//! `GET /openapi.json`: the OpenAPI 3.1 description of every endpoint,
//! with the server address filled in from the public URL.

use std::sync::LazyLock;

use axum::Json;
use axum::extract::State;
use serde_json::Value;

use crate::state::AppState;

/// The document, parsed once. `tests/openapi.rs` checks that it parses and
/// that what is served equals the file.
static DOCUMENT: LazyLock<Value> = LazyLock::new(|| {
    serde_json::from_str(include_str!("../../openapi.json")).unwrap_or(Value::Null)
});

pub async fn document(State(state): State<AppState>) -> Json<Value> {
    let mut doc = DOCUMENT.clone();
    doc["servers"] = serde_json::json!([{"url": &*state.public_url}]);
    Json(doc)
}
