//! One module per resource; [`router`] assembles them.

pub(crate) mod audit_logs;
mod device;
mod health;
mod key;
mod metrics;
pub(crate) mod models;
pub(crate) mod openapi;
pub(crate) mod organization;
pub(crate) mod request_logs;
mod usage;
pub(crate) mod usage_buckets;

use axum::Router;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::state::AppState;

/// The device flow's body parsing, for the fuzz targets in `fuzz/`.
#[doc(hidden)]
pub use device::{fuzz_code_body, fuzz_token_form};

/// An endpoint's routes, with their OpenAPI operations.
type Routes = fn() -> OpenApiRouter<AppState>;

/// Every endpoint: its declaration (beside its handlers) and its routes,
/// in the OpenAPI document's order. An endpoint is added here, one line,
/// and nowhere else: the document's tags and generating operations, the
/// request log's dialects and the endpoints a batch may call are read
/// from the declarations.
const TABLE: &[(&Endpoint, Routes)] = &[
    (&crate::chat::ENDPOINT, crate::chat::routes),
    (&crate::completions::ENDPOINT, crate::completions::routes),
    (&crate::embeddings::ENDPOINT, crate::embeddings::routes),
    (&crate::rerank::ENDPOINT, crate::rerank::routes),
    (&crate::audio::ENDPOINT, crate::audio::routes),
    (&crate::responses::ENDPOINT, crate::responses::routes),
    (&crate::messages::ENDPOINT, crate::messages::routes),
    (
        &crate::batches::batch::ENDPOINT,
        crate::batches::batch::routes,
    ),
    (
        &crate::batches::files::ENDPOINT,
        crate::batches::files::routes,
    ),
    (&crate::mcp::ENDPOINT, crate::mcp::routes),
    (&models::ENDPOINT, models),
    (&health::ENDPOINT, meta),
    (&device::ENDPOINT, auth),
    (&organization::ENDPOINT, admin),
];

/// The endpoints' declarations, in the document's order.
pub(crate) static ENDPOINTS: [&Endpoint; TABLE.len()] = {
    let mut endpoints = [TABLE[0].0; TABLE.len()];
    let mut i = 0;
    while i < TABLE.len() {
        endpoints[i] = TABLE[i].0;
        i += 1;
    }
    endpoints
};

/// Every route of the API, each with its OpenAPI operation (declared on
/// its handler): what [`router`] serves and what the document lists.
pub fn api() -> OpenApiRouter<AppState> {
    TABLE
        .iter()
        .fold(OpenApiRouter::new(), |api, (_, routes)| api.merge(routes()))
}

fn models() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(models::list))
        .routes(routes!(models::retrieve))
        .routes(routes!(models::load))
        .routes(routes!(models::unload))
}

/// Health, readiness and the document itself.
fn meta() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(health::health))
        .routes(routes!(health::ready))
        .routes(routes!(openapi::serve))
}

/// The device flow, and a key's own view of itself and its usage.
fn auth() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(device::code))
        .routes(routes!(device::token))
        .routes(routes!(device::metadata))
        .routes(routes!(key::current, key::revoke))
        .routes(routes!(usage::admin))
}

/// The admin API.
fn admin() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(
            organization::list_projects,
            organization::create_project
        ))
        .routes(routes!(
            organization::get_project,
            organization::modify_project
        ))
        .routes(routes!(organization::list_keys, organization::create_key))
        .routes(routes!(
            organization::get_key,
            organization::modify_key,
            organization::delete_key
        ))
        .routes(routes!(organization::rotate_key))
        .routes(routes!(organization::list_users, organization::add_user))
        .routes(routes!(organization::remove_user))
        .routes(routes!(audit_logs::list))
        .routes(routes!(request_logs::list))
        .routes(routes!(organization::list_organization_users))
        .routes(routes!(
            organization::get_organization_user,
            organization::modify_organization_user
        ))
        .routes(routes!(usage_buckets::completions))
        .routes(routes!(usage_buckets::audio_speeches))
        .routes(routes!(usage_buckets::audio_transcriptions))
}

/// `GET /metrics`, which the application serves beside the API or on an
/// address of its own.
pub fn metrics() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(metrics::endpoint))
}

/// Every route of the service but `/metrics`: the API and the dashboard.
pub fn router() -> Router<AppState> {
    Router::from(api())
        .merge(crate::dashboard::router())
        .fallback(ApiError::unknown_url)
        .method_not_allowed_fallback(ApiError::method_not_allowed)
}
