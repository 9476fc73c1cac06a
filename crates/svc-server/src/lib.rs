//! svc's HTTP service: the OpenAI-compatible API on axum.
//!
//! [`Application::build`] binds the socket and returns the bound address, so
//! tests start the real server exactly the way `svc serve` does.

pub mod anthropic;
pub mod budget;
pub mod config;
pub mod conversations;
pub mod dashboard;
pub mod error;
pub mod extract;
pub mod metrics;
pub mod oidc;
pub mod openapi;
pub mod projects;
pub mod ratelimit;
pub mod registry;
pub mod request_id;
pub mod responses_shape;
pub mod routes;
pub mod scopes;
mod serve;
pub mod shape;
pub mod startup;
pub mod state;
pub mod usage;

pub use config::ServerConfig;
pub use error::ApiError;
pub use registry::{ModelRegistry, ModelRoute};
pub use startup::Application;
pub use state::AppState;
