//! The OpenAPI 3.1 document: the operations the routes declare, in the
//! frame of [`crate::openapi`]; and `GET /openapi.json`, which serves it
//! with the server address filled in from the public URL.

use std::sync::LazyLock;

use axum::Json;
use axum::extract::State;
use serde_json::Value;
use utoipa::openapi::OpenApi;

use crate::error::ApiError;
use crate::state::AppState;

crate::openapi::json_schemas! {
    /// An OpenAPI document: `openapi`, `info` and `paths`, at least.
    Document = {"type": "object", "required": ["openapi", "info", "paths"]};
}

/// The document as JSON, built once; `servers` holds a placeholder that
/// `GET /openapi.json` replaces with the public URL. An error (a document
/// that does not serialize) is the route's logged 500, never a `null`.
pub fn document() -> Result<&'static Value, &'static str> {
    static DOCUMENT: LazyLock<Result<Value, String>> =
        LazyLock::new(|| serde_json::to_value(whole()).map_err(|e| e.to_string()));
    DOCUMENT.as_ref().map_err(String::as_str)
}

/// The whole document: every route's operation, `/metrics` included.
fn whole() -> OpenApi {
    let (_, api) = super::api().split_for_parts();
    let (_, metrics) = super::metrics().split_for_parts();
    crate::openapi::framed(api, metrics, &super::ENDPOINTS)
}

#[utoipa::path(get, path = "/openapi.json", tag = "meta", operation_id = "openapi",
    summary = "This document, with `servers` set to the server's public URL.",
    responses((status = 200, description = "The OpenAPI 3.1 document.", body = inline(Document))))]
pub async fn serve(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let mut doc = document()
        .map_err(|e| ApiError::Internal(format!("the OpenAPI document: {e}")))?
        .clone();
    doc["servers"] = serde_json::json!([{"url": &*state.public_url}]);
    Ok(Json(doc))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation's tags are declared, and every declared tag is used:
    /// an endpoint added without its `ENDPOINT` (as audio, batches and files
    /// once were) fails here.
    #[test]
    fn every_operation_is_in_a_declared_group() {
        let declared: Vec<&str> = super::super::ENDPOINTS.iter().map(|e| e.tag).collect();
        let mut used = Vec::new();
        for (path, item) in whole().paths.paths {
            let operations = [
                &item.get,
                &item.put,
                &item.post,
                &item.delete,
                &item.patch,
                &item.head,
            ];
            for operation in operations.into_iter().flatten() {
                let tags = operation.tags.clone().unwrap_or_default();
                assert!(!tags.is_empty(), "{path}: an operation without a tag");
                for tag in tags {
                    assert!(
                        declared.contains(&tag.as_str()),
                        "{path}: tag {tag:?} is not declared (an ENDPOINT beside its handler, listed in routes::TABLE)"
                    );
                    used.push(tag);
                }
            }
        }
        for tag in declared {
            assert!(
                used.iter().any(|u| u == tag),
                "tag {tag:?} is declared but unused"
            );
        }
    }

    /// What each endpoint declares is true of its operations: the
    /// operation it says generates is one of its own, each path it claims
    /// begins one of its operations' paths, and the path batches may call
    /// is one of its `POST`s. A declaration that names nothing (a renamed
    /// operation, a moved path) fails here rather than doing nothing.
    #[test]
    fn every_declaration_names_its_own_operations() {
        let document = whole();
        // (tag, method, path, operation id) of every operation.
        let mut operations = Vec::new();
        for (path, item) in &document.paths.paths {
            for (method, operation) in [
                ("get", &item.get),
                ("post", &item.post),
                ("delete", &item.delete),
            ] {
                let Some(operation) = operation else { continue };
                for tag in operation.tags.iter().flatten() {
                    let id = operation.operation_id.clone().unwrap_or_default();
                    operations.push((tag.clone(), method, path.clone(), id));
                }
            }
        }
        for endpoint in super::super::ENDPOINTS {
            let own = || operations.iter().filter(|o| o.0 == endpoint.tag);
            if let Some(id) = endpoint.generates {
                assert!(own().any(|o| o.3 == id), "{}: generates {id}", endpoint.tag);
            }
            for prefix in endpoint.paths {
                assert!(
                    own().any(|o| o.2.starts_with(prefix)),
                    "{}: path {prefix} begins none of its operations",
                    endpoint.tag
                );
            }
            if let Some(batch) = endpoint.batch {
                assert!(
                    own().any(|o| o.1 == "post" && o.2 == batch),
                    "{}: batches call {batch}, not one of its POSTs",
                    endpoint.tag
                );
            }
        }
    }
}
