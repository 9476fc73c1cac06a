//! `GET /v1/models` bodies.

use serde::{Deserialize, Serialize};

/// One entry of the model list, as OpenAI shapes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub id: String,
    pub object: String,
    pub created: i64,
    pub owned_by: String,
}

/// `{"object":"list","data":[...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    pub object: String,
    pub data: Vec<Model>,
}
