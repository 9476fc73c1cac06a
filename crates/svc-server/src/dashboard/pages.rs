//! Page rendering: the minijinja templates in `templates/`, the stylesheet
//! and script in `static/`, and [`PageError`], the HTML counterpart of
//! `ApiError`.

use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use minijinja::{Environment, Value, context};
use svc_core::StoreError;

/// The templates, compiled once.
static PAGES: std::sync::LazyLock<Pages> = std::sync::LazyLock::new(Pages::new);

/// Renders the template `name` with `ctx`.
pub fn render(name: &str, ctx: Value) -> Result<Html<String>, PageError> {
    PAGES.render(name, ctx)
}

/// The dashboard's templates.
pub struct Pages {
    env: Environment<'static>,
}

const TEMPLATES: &[(&str, &str)] = &[
    ("base.html", include_str!("../../templates/base.html")),
    ("login.html", include_str!("../../templates/login.html")),
    ("setup.html", include_str!("../../templates/setup.html")),
    ("signup.html", include_str!("../../templates/signup.html")),
    ("keys.html", include_str!("../../templates/keys.html")),
    (
        "key_created.html",
        include_str!("../../templates/key_created.html"),
    ),
    ("revoke.html", include_str!("../../templates/revoke.html")),
    (
        "key_access.html",
        include_str!("../../templates/key_access.html"),
    ),
    ("limits.html", include_str!("../../templates/limits.html")),
    ("rotate.html", include_str!("../../templates/rotate.html")),
    ("audit.html", include_str!("../../templates/audit.html")),
    (
        "requests.html",
        include_str!("../../templates/requests.html"),
    ),
    ("batches.html", include_str!("../../templates/batches.html")),
    ("usage.html", include_str!("../../templates/usage.html")),
    ("device.html", include_str!("../../templates/device.html")),
    (
        "device_confirm.html",
        include_str!("../../templates/device_confirm.html"),
    ),
    ("message.html", include_str!("../../templates/message.html")),
    ("users.html", include_str!("../../templates/users.html")),
    ("models.html", include_str!("../../templates/models.html")),
    ("budget.html", include_str!("../../templates/budget.html")),
    (
        "projects.html",
        include_str!("../../templates/projects.html"),
    ),
    ("project.html", include_str!("../../templates/project.html")),
    (
        "key_budget.html",
        include_str!("../../templates/key_budget.html"),
    ),
    (
        "user_confirm.html",
        include_str!("../../templates/user_confirm.html"),
    ),
];

impl Pages {
    pub fn new() -> Self {
        let mut env = Environment::new();
        for (name, source) in TEMPLATES {
            if let Err(e) = env.add_template(name, source) {
                // Templates are compiled into the binary; a test renders each.
                tracing::error!(template = name, error = %e, "dashboard template does not compile");
            }
        }
        Pages { env }
    }

    /// Renders `name` with `ctx`.
    pub fn render(&self, name: &str, ctx: Value) -> Result<Html<String>, PageError> {
        let template = self
            .env
            .get_template(name)
            .map_err(|e| PageError::Internal(e.to_string()))?;
        template
            .render(ctx)
            .map(Html)
            .map_err(|e| PageError::Internal(format!("rendering {name}: {e:#}")))
    }
}

impl Default for Pages {
    fn default() -> Self {
        Pages::new()
    }
}

/// `2026-11-22 05:09 UTC`.
/// A filter form's date (`YYYY-MM-DD`, UTC) as the Unix time of its start;
/// `None` when left empty, the person's error when it is not a date.
pub fn form_day(text: &str, field: &str) -> Result<Option<i64>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| Some(t.and_utc().timestamp()))
        .ok_or_else(|| format!("Enter the {field} date as YYYY-MM-DD."))
}

/// A filter form's text field as a list of one value, or none when empty.
pub fn form_one(text: &str) -> Vec<String> {
    let text = text.trim();
    if text.is_empty() {
        Vec::new()
    } else {
        vec![text.to_owned()]
    }
}

pub fn time(at: i64) -> String {
    chrono::DateTime::from_timestamp(at, 0)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_default()
}

/// A failed page: an HTML page with the right status.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error(
        "This form has expired or did not come from this site. Go back, reload the page and try again."
    )]
    Csrf,
    #[error("{0}")]
    BadRequest(String),
    #[error("There is no such page.")]
    NotFound,
    #[error("internal: {0}")]
    Internal(String),
}

impl From<StoreError> for PageError {
    fn from(e: StoreError) -> Self {
        PageError::Internal(e.to_string())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let (status, title, message) = match &self {
            PageError::Csrf => (StatusCode::FORBIDDEN, "Form expired", self.to_string()),
            PageError::BadRequest(m) => (StatusCode::BAD_REQUEST, "Bad request", m.clone()),
            PageError::NotFound => (StatusCode::NOT_FOUND, "Not found", self.to_string()),
            PageError::Internal(cause) => {
                let id = crate::scoped::request_id().unwrap_or_default();
                tracing::error!(error = %cause, "dashboard page failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Something went wrong",
                    format!(
                        "The server failed to show this page. If it keeps happening, give the operator this request id: {id}"
                    ),
                )
            }
        };
        let body = render(
            "message.html",
            context! { title => title, message => message.clone(), tone => "error" },
        )
        .map(|h| h.0)
        .unwrap_or_else(|_| message.clone());
        (status, Html(body)).into_response()
    }
}

pub async fn not_found() -> PageError {
    PageError::NotFound
}

pub async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        include_str!("../../static/app.css"),
    )
        .into_response()
}

pub async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        include_str!("../../static/app.js"),
    )
        .into_response()
}
