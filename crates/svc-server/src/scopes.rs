//! What each route that takes an API key needs the key to hold: one table,
//! read by the key extractors ([`crate::extract::Authenticated`] and its
//! Anthropic twin) on every request, so that no route can take a key
//! without saying what the key must be allowed. A route missing here
//! refuses every key (a 500 that names the route), so a new route cannot
//! forget it.

use axum::http::Method;
use svc_core::{KeyKind, Permission};

use crate::error::ApiError;

/// What a route needs of the key presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Any key, whatever its kind: the routes about the key itself
    /// (`/v1/auth/key`: who am I, log out).
    AnyKey,
    /// A key that holds this permission.
    Permission(Permission),
}

/// Every route that takes a key: method, path as the router writes it,
/// and what it needs.
pub const KEY_ROUTES: &[(&str, &str, Need)] = &[
    ("GET", "/v1/models", Need::Permission(Permission::ModelRead)),
    (
        "GET",
        "/v1/models/{*id}",
        Need::Permission(Permission::ModelRead),
    ),
    (
        "POST",
        "/v1/chat/completions",
        Need::Permission(Permission::ModelRequest),
    ),
    (
        "POST",
        "/v1/responses",
        Need::Permission(Permission::ResponsesWrite),
    ),
    (
        "GET",
        "/v1/responses/{id}",
        Need::Permission(Permission::ResponsesRead),
    ),
    (
        "DELETE",
        "/v1/responses/{id}",
        Need::Permission(Permission::ResponsesWrite),
    ),
    (
        "POST",
        "/v1/messages",
        Need::Permission(Permission::ModelRequest),
    ),
    (
        "POST",
        "/v1/messages/count_tokens",
        Need::Permission(Permission::ModelRequest),
    ),
    ("GET", "/v1/auth/key", Need::AnyKey),
    ("DELETE", "/v1/auth/key", Need::AnyKey),
    (
        "GET",
        "/v1/admin/usage",
        Need::Permission(Permission::UsageRead),
    ),
    (
        "GET",
        "/v1/organization/projects",
        Need::Permission(Permission::ManagementRead),
    ),
    (
        "POST",
        "/v1/organization/projects",
        Need::Permission(Permission::ManagementWrite),
    ),
    (
        "GET",
        "/v1/organization/projects/{project_id}",
        Need::Permission(Permission::ManagementRead),
    ),
    (
        "POST",
        "/v1/organization/projects/{project_id}",
        Need::Permission(Permission::ManagementWrite),
    ),
    (
        "GET",
        "/v1/organization/projects/{project_id}/api_keys",
        Need::Permission(Permission::ManagementRead),
    ),
    (
        "POST",
        "/v1/organization/projects/{project_id}/api_keys",
        Need::Permission(Permission::ManagementWrite),
    ),
    (
        "GET",
        "/v1/organization/projects/{project_id}/api_keys/{key_id}",
        Need::Permission(Permission::ManagementRead),
    ),
    (
        "POST",
        "/v1/organization/projects/{project_id}/api_keys/{key_id}",
        Need::Permission(Permission::ManagementWrite),
    ),
    (
        "DELETE",
        "/v1/organization/projects/{project_id}/api_keys/{key_id}",
        Need::Permission(Permission::ManagementWrite),
    ),
    (
        "POST",
        "/v1/organization/projects/{project_id}/api_keys/{key_id}/rotate",
        Need::Permission(Permission::ManagementWrite),
    ),
    (
        "GET",
        "/v1/organization/audit_logs",
        Need::Permission(Permission::ManagementRead),
    ),
    (
        "GET",
        "/v1/organization/usage/completions",
        Need::Permission(Permission::ManagementRead),
    ),
    (
        "GET",
        "/v1/organization/users",
        Need::Permission(Permission::ManagementRead),
    ),
    (
        "GET",
        "/v1/organization/users/{user_id}",
        Need::Permission(Permission::ManagementRead),
    ),
    (
        "POST",
        "/v1/organization/users/{user_id}",
        Need::Permission(Permission::ManagementWrite),
    ),
    (
        "GET",
        "/v1/organization/projects/{project_id}/users",
        Need::Permission(Permission::ManagementRead),
    ),
    (
        "POST",
        "/v1/organization/projects/{project_id}/users",
        Need::Permission(Permission::ManagementWrite),
    ),
    (
        "DELETE",
        "/v1/organization/projects/{project_id}/users/{user_id}",
        Need::Permission(Permission::ManagementWrite),
    ),
];

/// What `method` on the route `path` (as the router wrote it) needs.
pub fn need(method: &Method, path: &str) -> Option<Need> {
    KEY_ROUTES
        .iter()
        .find(|(m, p, _)| *p == path && *m == method.as_str())
        .map(|(_, _, need)| *need)
}

/// Whether a key of `kind` may call a route of `method` and `path`
/// (`None`: the request matched no route). The refusal names the missing
/// permission, in OpenAI's words.
pub fn check(kind: &KeyKind, method: &Method, path: Option<&str>) -> Result<(), ApiError> {
    let Some(need) = path.and_then(|p| need(method, p)) else {
        return Err(ApiError::Internal(format!(
            "the route {method} {} takes a key but has no entry in scopes::KEY_ROUTES",
            path.unwrap_or("(unmatched)")
        )));
    };
    match need {
        Need::AnyKey => Ok(()),
        Need::Permission(p) if kind.allows(p) => Ok(()),
        Need::Permission(p) => Err(ApiError::Forbidden(format!(
            "You have insufficient permissions for this operation. Missing scopes: {p}."
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_route_is_listed_once() {
        let mut seen = std::collections::HashSet::new();
        for (method, path, _) in KEY_ROUTES {
            assert!(seen.insert((method, path)), "{method} {path} twice");
            assert!(Method::from_bytes(method.as_bytes()).is_ok());
        }
    }

    #[test]
    fn refusals_name_the_missing_permission() {
        let none = KeyKind::Restricted(vec![]);
        let err = check(&none, &Method::POST, Some("/v1/chat/completions")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "You have insufficient permissions for this operation. Missing scopes: model.request."
        );
        assert_eq!(err.status(), 403);
        assert!(check(&none, &Method::GET, Some("/v1/auth/key")).is_ok());
        assert!(check(&KeyKind::All, &Method::POST, Some("/v1/chat/completions")).is_ok());
        assert!(
            check(
                &KeyKind::Admin(svc_core::AdminReach::Organization),
                &Method::POST,
                Some("/v1/chat/completions")
            )
            .is_err()
        );
        assert!(
            check(
                &KeyKind::All,
                &Method::GET,
                Some("/v1/organization/projects")
            )
            .is_err()
        );
        assert!(
            check(
                &KeyKind::Admin(svc_core::AdminReach::Organization),
                &Method::GET,
                Some("/v1/organization/projects")
            )
            .is_ok()
        );
    }

    #[test]
    fn a_route_missing_from_the_table_refuses_every_key() {
        for kind in [
            KeyKind::All,
            KeyKind::Admin(svc_core::AdminReach::Organization),
        ] {
            let err = check(&kind, &Method::GET, Some("/v1/new")).unwrap_err();
            assert_eq!(err.status(), 500);
            assert!(check(&kind, &Method::PUT, Some("/v1/models")).is_err());
            assert!(check(&kind, &Method::GET, None).is_err());
        }
    }
}
