//! One module per resource; [`router`] assembles them.

pub(crate) mod audit_logs;
mod chat;
mod device;
mod health;
mod key;
mod messages;
mod models;
mod openapi;
mod organization;
mod responses;
mod usage;
pub(crate) mod usage_completions;

use axum::Router;
use axum::extract::Request;
use axum::routing::{get, post};
use svc_api::{AUTHORIZATION_SERVER_METADATA_PATH, DEVICE_AUTHORIZATION_PATH, TOKEN_PATH};

use crate::error::ApiError;
use crate::state::AppState;

/// The `Cache-Control` of the RFC 8414 metadata (the document says so).
pub(crate) use device::METADATA_CACHE_CONTROL;
/// The device flow's body parsing, for the fuzz targets in `fuzz/`.
#[doc(hidden)]
pub use device::{fuzz_code_body, fuzz_token_form};
/// The most days `GET /v1/admin/usage` may ask for (the document says so).
pub(crate) use usage::MAX_DAYS as MAX_USAGE_DAYS;

/// Every route of the service but `/metrics` (which the application adds
/// here or on its own address).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/health", get(health::health))
        .route("/ready", get(health::ready))
        .route("/openapi.json", get(openapi::document))
        .route("/v1/models", get(models::list))
        .route("/v1/models/{*id}", get(models::retrieve))
        .route("/v1/chat/completions", post(chat::create))
        .route("/v1/responses", post(responses::create))
        .route(
            "/v1/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .merge(messages_routes())
        .route(DEVICE_AUTHORIZATION_PATH, post(device::code))
        .route(TOKEN_PATH, post(device::token))
        .route(AUTHORIZATION_SERVER_METADATA_PATH, get(device::metadata))
        .route("/v1/auth/key", get(key::current).delete(key::revoke))
        .route("/v1/admin/usage", get(usage::admin))
        .route(
            "/v1/organization/projects",
            get(organization::list_projects).post(organization::create_project),
        )
        .route(
            "/v1/organization/projects/{project_id}",
            get(organization::get_project).post(organization::modify_project),
        )
        .route(
            "/v1/organization/projects/{project_id}/api_keys",
            get(organization::list_keys).post(organization::create_key),
        )
        .route(
            "/v1/organization/projects/{project_id}/users",
            get(organization::list_users).post(organization::add_user),
        )
        .route(
            "/v1/organization/projects/{project_id}/users/{user_id}",
            axum::routing::delete(organization::remove_user),
        )
        .route(
            "/v1/organization/projects/{project_id}/api_keys/{key_id}",
            get(organization::get_key)
                .post(organization::modify_key)
                .delete(organization::delete_key),
        )
        .route(
            "/v1/organization/projects/{project_id}/api_keys/{key_id}/rotate",
            post(organization::rotate_key),
        )
        .route("/v1/organization/audit_logs", get(audit_logs::list))
        .route(
            "/v1/organization/users",
            get(organization::list_organization_users),
        )
        .route(
            "/v1/organization/users/{user_id}",
            get(organization::get_organization_user).post(organization::modify_organization_user),
        )
        .route(
            "/v1/organization/usage/completions",
            get(usage_completions::list),
        )
        .merge(crate::dashboard::router())
        .fallback(unknown_url)
        .method_not_allowed_fallback(method_not_allowed)
        // Outside the routing, so that a wrong method or path under
        // /v1/messages is answered in Anthropic's shape too.
        .layer(axum::middleware::from_fn(crate::anthropic::errors))
}

/// Anthropic's Messages API, whose errors are all in Anthropic's shape
/// (see [`crate::anthropic::errors`]).
fn messages_routes() -> Router<AppState> {
    Router::new()
        .route("/v1/messages", post(messages::create))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
}

pub(crate) async fn unknown_url(request: Request) -> ApiError {
    ApiError::UnknownUrl {
        method: request.method().to_string(),
        path: request.uri().path().to_owned(),
    }
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::MethodNotAllowed {
        method: request.method().to_string(),
        path: request.uri().path().to_owned(),
    }
}
