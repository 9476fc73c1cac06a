//! The web dashboard: server-rendered pages (no JavaScript needed) for
//! signing in (with a password, or through an OpenID Connect provider),
//! API keys (with rotation and budgets), usage, the models (loaded or not;
//! organization owners load and unload them), approving
//! device logins, projects and their members (for organization and project
//! owners), and (for admins) disabling, enabling and deleting accounts,
//! setting their organization role, and
//! reading the audit log.
//!
//! Security model: sessions are random tokens in an HttpOnly, SameSite=Lax
//! cookie (Secure on https), stored hashed; every form carries a CSRF token
//! (the session's own, or for anonymous forms a double-submit cookie); pages
//! are never cached, never framed, send no referrer (setup and device links
//! carry codes), and load scripts and styles only from this origin.

mod account;
mod audit;
mod batches;
mod device;
mod forms;
mod keys;
mod models;
mod pages;
mod projects;
mod requests;
mod session;
mod sso;
mod usage;
mod users;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

pub use crate::state::dashboard::PATH;

use crate::state::AppState;

/// Every dashboard route.
pub fn router() -> Router<AppState> {
    let pages = Router::new()
        .route(PATH, get(|| async { Redirect::to("/dashboard/keys") }))
        .route(
            "/dashboard/login",
            get(account::login_page).post(account::login),
        )
        .route("/dashboard/login/sso", get(sso::start))
        .route("/dashboard/login/sso/callback", get(sso::callback))
        .route("/dashboard/logout", axum::routing::post(account::logout))
        .route(
            "/dashboard/setup",
            get(account::setup_page).post(account::setup),
        )
        .route(
            "/dashboard/signup",
            get(account::signup_page).post(account::signup),
        )
        .route("/dashboard/keys", get(keys::list).post(keys::create))
        .route("/dashboard/keys/new", get(keys::created))
        .route(
            "/dashboard/keys/{id}/revoke",
            get(keys::revoke_page).post(keys::revoke),
        )
        .route(
            "/dashboard/keys/{id}/rotate",
            get(keys::rotate_page).post(keys::rotate),
        )
        .route("/dashboard/audit", get(audit::page))
        .route("/dashboard/requests", get(requests::page))
        .route("/dashboard/batches", get(batches::page))
        .route(
            "/dashboard/batches/{project}/files/{file}",
            get(batches::download),
        )
        .route(
            "/dashboard/keys/{id}/limits",
            get(keys::limits_page).post(keys::set_limits),
        )
        .route(
            "/dashboard/keys/{id}/budget",
            get(keys::budget_page).post(keys::set_budget),
        )
        .route(
            "/dashboard/keys/{id}/access",
            get(keys::access_page).post(keys::set_access),
        )
        .route(
            "/dashboard/projects",
            get(projects::list).post(projects::create),
        )
        .route("/dashboard/projects/{id}", get(projects::show))
        .route(
            "/dashboard/projects/{id}/settings",
            axum::routing::post(projects::set_settings),
        )
        .route(
            "/dashboard/projects/{id}/members",
            axum::routing::post(projects::set_member),
        )
        .route(
            "/dashboard/projects/{id}/admin_key",
            axum::routing::post(projects::create_admin_key),
        )
        .route(
            "/dashboard/projects/{id}/members/{user_id}/remove",
            axum::routing::post(projects::remove_member),
        )
        .route("/dashboard/models", get(models::page))
        .route("/dashboard/models/load", axum::routing::post(models::load))
        .route(
            "/dashboard/models/unload",
            axum::routing::post(models::unload),
        )
        .route("/dashboard/usage", get(usage::page))
        .route("/dashboard/users", get(users::list))
        .route(
            "/dashboard/users/{id}/role",
            axum::routing::post(users::set_role),
        )
        .route(
            "/dashboard/users/{id}/{action}",
            get(users::confirm_page).post(users::act),
        )
        .route("/dashboard/device", get(device::page).post(device::enter))
        .route(
            "/dashboard/device/decide",
            axum::routing::post(device::decide),
        )
        .route("/dashboard/{*rest}", get(pages::not_found))
        .layer(middleware::from_fn(page_headers));
    pages
        .route("/dashboard/static/app.css", get(pages::stylesheet))
        .route("/dashboard/static/app.js", get(pages::script))
}

/// Headers every page gets.
async fn page_headers(request: axum::extract::Request, next: Next) -> Response {
    let mut response = next.run(request).await.into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
