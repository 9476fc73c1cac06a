//! `GET /openapi.json`: the OpenAPI 3.1 description of every endpoint,
//! with the server address filled in from the public URL.

use axum::Json;
use axum::extract::State;
use serde_json::Value;

use crate::state::AppState;

const DOCUMENT: &str = include_str!("../../openapi.json");

pub async fn document(State(state): State<AppState>) -> Json<Value> {
    let mut doc: Value = serde_json::from_str(DOCUMENT).unwrap_or(Value::Null);
    doc["servers"] = serde_json::json!([{"url": &*state.public_url}]);
    Json(doc)
}
