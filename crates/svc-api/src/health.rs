//! `GET /health` and `GET /ready` bodies.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::Object;

use crate::schema::constant;

/// `GET /health`: `{"status":"ok"}`, the process answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HealthStatus {
    #[schema(schema_with = status_ok)]
    pub status: String,
}

impl HealthStatus {
    pub fn ok() -> Self {
        HealthStatus {
            status: "ok".into(),
        }
    }
}

/// `GET /ready`: `{"status":"ready"}`, the process and its store answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReadyStatus {
    #[schema(schema_with = status_ready)]
    pub status: String,
}

impl ReadyStatus {
    pub fn ready() -> Self {
        ReadyStatus {
            status: "ready".into(),
        }
    }
}

fn status_ok() -> Object {
    constant("ok")
}

fn status_ready() -> Object {
    constant("ready")
}
