//! Cookies, the signed-in extractor, and CSRF checks.

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::{Value, context};
use svc_core::secrets::same_token;
use svc_core::{Actor, ActorUser, SessionRecord, UserRecord};

use super::pages::PageError;
use crate::extract::ClientAddress;
use crate::state::AppState;

/// The session cookie: the token whose hash names a stored session.
pub const SESSION_COOKIE: &str = "svc_session";
/// The double-submit CSRF cookie of forms shown before sign-in.
pub const CSRF_COOKIE: &str = "svc_csrf";

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"').to_owned())
        .filter(|v| !v.is_empty())
}

/// A `Set-Cookie` value for the dashboard's path; `max_age` 0 deletes it.
pub fn set_cookie(name: &str, value: &str, max_age: i64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let text = format!(
        "{name}={value}; Path={}; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}",
        super::PATH
    );
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// What every signed-in page's layout needs.
pub fn layout(who: &SignedIn, nav: &str) -> Value {
    context! {
        user => context! {
            email => who.user.email.clone(),
            is_admin => who.user.is_admin,
            sees_projects => who.sees_projects,
        },
        csrf => who.session.csrf_token.clone(),
        nav => nav,
    }
}

/// A signed-in person: pages that take it redirect to the sign-in page
/// (and back afterwards) when there is no live session.
pub struct SignedIn {
    pub user: UserRecord,
    pub session: SessionRecord,
    /// The cookie's token (for the session's flash values).
    pub token: String,
    /// The client's address, as the server derives it for throttles.
    pub address: Option<String>,
    /// Whether the Projects section exists for them: an organization owner,
    /// or an owner of a project.
    pub sees_projects: bool,
}

impl SignedIn {
    /// This person, from this address, as the audit log names them.
    pub fn actor(&self) -> Actor {
        Actor::Session {
            user: Some(ActorUser::from(&self.user)),
            address: self.address.clone(),
        }
    }

    /// Checks a submitted form's CSRF token against the session's.
    pub fn check_csrf(&self, submitted: &str) -> Result<(), PageError> {
        if same_token(submitted, &self.session.csrf_token) {
            Ok(())
        } else {
            Err(PageError::Csrf)
        }
    }
}

impl<S> FromRequestParts<S> for SignedIn
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let state = AppState::from_ref(state);
        let Ok(ClientAddress(address)) = ClientAddress::from_request_parts(parts, &()).await;
        let to_login = || {
            let back = parts
                .uri
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or(super::PATH);
            let target = if parts.method == axum::http::Method::GET {
                format!("/dashboard/login?next={}", urlencode(back))
            } else {
                "/dashboard/login".to_owned()
            };
            Redirect::to(&target).into_response()
        };
        let Some(token) = cookie(&parts.headers, SESSION_COOKIE) else {
            return Err(to_login());
        };
        let (session, user) = match state.accounts.session(&token).await {
            Ok(Some(found)) => found,
            Ok(None) => return Err(to_login()),
            Err(e) => return Err(PageError::from(e).into_response()),
        };
        let sees_projects = user.is_admin
            || !state
                .store
                .owned_projects(&user.id)
                .await
                .map_err(|e| PageError::from(e).into_response())?
                .is_empty();
        Ok(SignedIn {
            user,
            session,
            token,
            address,
            sees_projects,
        })
    }
}

/// Percent-encodes a query value.
pub fn urlencode(text: &str) -> String {
    serde_urlencoded::to_string([("", text)])
        .map(|s| s.trim_start_matches('=').to_owned())
        .unwrap_or_default()
}

/// Where to go after sign-in: only paths inside the dashboard, so the
/// parameter cannot send people to another site, and only printable ASCII
/// (what a percent-encoded path is), so it is always a valid `Location`.
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if (n == super::PATH
                || n.starts_with("/dashboard/")
                || n.starts_with("/dashboard?"))
                && !n.contains("//")
                && !n.contains('\\')
                && n.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            n.to_owned()
        }
        _ => "/dashboard/keys".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; svc_session=abc; b=2"),
        );
        assert_eq!(cookie(&headers, "svc_session").as_deref(), Some("abc"));
        assert_eq!(cookie(&headers, "svc"), None);
    }

    #[test]
    fn next_stays_inside_the_dashboard() {
        assert_eq!(
            safe_next(Some("/dashboard/device?user_code=BCDF-GHJK")),
            "/dashboard/device?user_code=BCDF-GHJK"
        );
        for bad in [
            "https://evil.example/",
            "//evil.example",
            "/dashboard//evil",
            "/dashboard/keys\r\nSet-Cookie: x=1",
            "/dashboard/keys\u{7f}",
            "/dashboard/k\u{e9}ys",
            "/v1/models",
            "/dashboardx",
        ] {
            assert_eq!(safe_next(Some(bad)), "/dashboard/keys", "{bad}");
        }
        assert_eq!(safe_next(None), "/dashboard/keys");
    }
}
