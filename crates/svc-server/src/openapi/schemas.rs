//! How operations write what attributes cannot: a schema as JSON
//! ([`json_schemas!`], for `const` or bounds taken from constants) and
//! groups of parameters ([`parameters!`], for `params(T)`).

use serde_json::Value;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{RefOr, Required};

/// A schema from its JSON: for what attributes cannot say (`const`,
/// bounds from constants), as a type to name in a `#[utoipa::path]`
/// (`body = inline(T)`, `headers(("name" = inline(T)))`).
pub(crate) fn schema_of(json: Value) -> RefOr<Schema> {
    // Written here, checked by the document's snapshot.
    let Ok(mut schema) = serde_json::from_value::<RefOr<Schema>>(json.clone()) else {
        return RefOr::T(Schema::default());
    };
    // Keywords utoipa's model has no field for (`const`) stay as written.
    if let (RefOr::T(Schema::Object(object)), Value::Object(given)) = (&mut schema, &json) {
        let read = serde_json::to_value(&*object).unwrap_or_default();
        let lost: Vec<(String, Value)> = given
            .iter()
            .filter(|(key, _)| read.get(key.as_str()).is_none())
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        *object = svc_api::schema::keywords(std::mem::take(object), lost);
    }
    schema
}

/// `name` in `location` with `schema` (JSON).
pub(crate) fn parameter(
    name: &str,
    location: ParameterIn,
    required: bool,
    description: &str,
    schema: Value,
) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(location)
        .required(if required {
            Required::True
        } else {
            Required::False
        })
        .description(Some(description))
        .schema(Some(schema_of(schema)))
        .build()
}

/// Types whose schema is JSON: `name = {json};`, or `name = {json} refers
/// to T, U;` when its `$ref`s name the components of types `T` and `U`
/// (collected with it, as utoipa does for a derived schema's fields).
macro_rules! json_schemas {
    ($($(#[$doc:meta])* $name:ident = $json:tt $(refers to $($refers:ty),+)?;)*) => {$(
        $(#[$doc])*
        pub(crate) struct $name;
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                $crate::openapi::schemas::schema_of(serde_json::json!($json))
            }
        }
        impl utoipa::ToSchema for $name {
            fn schemas(
                _schemas: &mut Vec<(
                    String,
                    utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
                )>,
            ) {
                $($(
                    _schemas.push((
                        <$refers as utoipa::ToSchema>::name().into_owned(),
                        <$refers as utoipa::PartialSchema>::schema(),
                    ));
                    <$refers as utoipa::ToSchema>::schemas(_schemas);
                )+)?
            }
        }
    )*};
}
pub(crate) use json_schemas;

/// Groups of parameters for `params(T)` in a `#[utoipa::path]`:
/// `name { (name, Query | Path, required, description, {schema}), ... }`.
macro_rules! parameters {
    ($($(#[$doc:meta])* $name:ident { $(($param:expr, $in:ident, $required:expr, $about:expr, $schema:tt)),* $(,)? })*) => {$(
        $(#[$doc])*
        pub(crate) struct $name;
        impl utoipa::IntoParams for $name {
            fn into_params(
                _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
            ) -> Vec<utoipa::openapi::path::Parameter> {
                vec![$($crate::openapi::schemas::parameter(
                    $param,
                    utoipa::openapi::path::ParameterIn::$in,
                    $required,
                    $about,
                    serde_json::json!($schema),
                )),*]
            }
        }
    )*};
}
pub(crate) use parameters;

json_schemas! {
    /// `Cache-Control: no-store`.
    NoStore = {"type": "string", "const": "no-store"};
}
