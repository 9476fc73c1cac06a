//! Lists kept in one TEXT column as a JSON array of strings (a key's
//! permissions, a project's or a key's allowed models and MCP servers);
//! NULL is "no list".

use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::project::{McpServerAccess, ModelAccess};
use svc_core::store::UnknownValue;

use crate::error::unknown_value;

/// The list in `column`, `None` when NULL; a value that is not a JSON
/// array of strings is a decoding error naming the column.
pub(crate) fn strings(row: &AnyRow, column: &str) -> Result<Option<Vec<String>>, sqlx::Error> {
    let Some(text) = row.try_get::<Option<String>, _>(column)? else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|_| unknown_value(column, UnknownValue::new("JSON list of strings", &text)))
}

/// The models `column` allows (NULL: every model).
pub(crate) fn model_access(row: &AnyRow, column: &str) -> Result<ModelAccess, sqlx::Error> {
    strings(row, column).map(ModelAccess)
}

/// `items` as a JSON array.
pub(crate) fn to_json(items: impl Iterator<Item = String>) -> String {
    serde_json::Value::Array(items.map(serde_json::Value::String).collect()).to_string()
}

/// The stored form of `access`: NULL for every model.
pub(crate) fn model_access_json(access: &ModelAccess) -> Option<String> {
    access.0.as_ref().map(|list| to_json(list.iter().cloned()))
}

/// The registered MCP servers `column` allows (NULL: every one).
pub(crate) fn mcp_server_access(
    row: &AnyRow,
    column: &str,
) -> Result<McpServerAccess, sqlx::Error> {
    strings(row, column).map(McpServerAccess)
}

/// The stored form of `access`: NULL for every server.
pub(crate) fn mcp_server_access_json(access: &McpServerAccess) -> Option<String> {
    access.0.as_ref().map(|list| to_json(list.iter().cloned()))
}
