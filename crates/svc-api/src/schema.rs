//! Building blocks of the wire types' OpenAPI schemas: what the
//! `#[derive(ToSchema)]` attributes cannot say (a `const`, JSON Schema
//! 2020-12 keywords such as `if`/`then`, `null`), and the macros for the
//! types whose schema is written by hand. A leaf: it names no wire module.
//!
//! There is no list of schemas: the server's router collects the schemas
//! its operations name (`#[utoipa::path]`), and through
//! [`ToSchema::schemas`] those they refer to. A derived `ToSchema` does not
//! see what a field written out with `schema_with` refers to, nor does a
//! hand-written one unless it says so; those types name them in their own
//! `schemas` (`named_schema!` with `refers to`, `twin_schema!`).

use serde_json::Value;
use utoipa::openapi::RefOr;
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{AnyOfBuilder, Object, ObjectBuilder, Ref, Schema, SchemaType, Type};
use utoipa::{PartialSchema, ToSchema};

/// A `$ref` to the component schema `name`.
pub fn reference(name: &str) -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(name))
}

/// `{"const": value}`.
pub fn constant(value: impl Into<Value>) -> Object {
    keywords(
        ObjectBuilder::new()
            .schema_type(SchemaType::AnyValue)
            .build(),
        [("const", value.into())],
    )
}

/// OpenAI's reasoning efforts, least first: what chat's `reasoning_effort`
/// and Responses' `reasoning.effort` take.
pub const REASONING_EFFORTS: [&str; 5] = ["none", "minimal", "low", "medium", "high"];

/// A reasoning effort ([`REASONING_EFFORTS`]) or `null`, described.
pub fn reasoning_effort(description: &str) -> Schema {
    AnyOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(REASONING_EFFORTS)),
        )
        .item(null())
        .description(Some(description))
        .into()
}

/// `{"type": "null"}`.
pub fn null() -> Object {
    ObjectBuilder::new().schema_type(Type::Null).build()
}

/// `{"type": ty}`, with a description when given.
pub fn typed(ty: Type, description: Option<&str>) -> Object {
    ObjectBuilder::new()
        .schema_type(ty)
        .description(description)
        .build()
}

/// `schema` or `null`.
pub fn or_null(schema: impl Into<RefOr<Schema>>, description: Option<&str>) -> Schema {
    AnyOfBuilder::new()
        .item(schema)
        .item(null())
        .description(description)
        .into()
}

/// `object` with JSON Schema keywords that utoipa's model has no field for
/// (`const`, `if`, `then`, `not`, `anyOf` beside `properties`...). They are
/// carried in the object's extension map, which is written flattened into
/// the schema, so they appear as plain keywords.
pub fn keywords<K: Into<String>>(
    mut object: Object,
    pairs: impl IntoIterator<Item = (K, Value)>,
) -> Object {
    let more: Extensions = pairs.into_iter().map(|(k, v)| (k.into(), v)).collect();
    match &mut object.extensions {
        Some(existing) => existing.merge(more),
        None => object.extensions = Some(more),
    }
    object
}

/// Adds `T`'s schema, under its name, and the schemas it refers to: what
/// utoipa does for a type a `#[utoipa::path]` names, for a
/// [`ToSchema::schemas`] written by hand.
pub(crate) fn collect<T: ToSchema>(schemas: &mut Vec<(String, RefOr<Schema>)>) {
    schemas.push((T::name().into_owned(), <T as PartialSchema>::schema()));
    T::schemas(schemas);
}

/// A type for a schema that no Rust type carries (the server writes the
/// frames of a stream itself), so that an operation can name it:
/// `name` is the component's, `schema` builds it, and `refers to` lists
/// the types of the components it refers to (collected with it).
macro_rules! named_schema {
    ($(#[$doc:meta])* $ty:ident = $name:expr, $schema:path; refers to $($refers:ty),+ $(,)?) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $ty;
        impl utoipa::PartialSchema for $ty {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                $schema()
            }
        }
        impl utoipa::ToSchema for $ty {
            fn name() -> std::borrow::Cow<'static, str> {
                std::borrow::Cow::Borrowed($name)
            }

            fn schemas(
                schemas: &mut Vec<(
                    String,
                    utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
                )>,
            ) {
                $($crate::schema::collect::<$refers>(schemas);)+
            }
        }
    };
}
pub(crate) use named_schema;

/// A wire struct whose schema is derived from its fields but whose
/// `ToSchema` is written by hand, beside the macro's call: to add what no
/// attribute can say (the rules between fields), or to collect the
/// schemas that fields written out with `schema_with` refer to (the
/// derive collects none for them).
///
/// The derive runs on a twin of the struct (`struct $twin;` after it): the
/// same fields, docs and `#[serde]` attributes, and the `#[schema]` ones,
/// which the struct itself does not take. The twin is never built; its
/// `ToSchema` is the derived schema for the struct's own. A field's
/// attributes come in this order: docs, `#[serde(...)]`, `#[schema(...)]`.
macro_rules! twin_schema {
    (
        $(#[$attr:meta])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:expr])*
                $(#[serde $serde:tt])*
                $(#[schema $schema:tt])*
                pub $field:ident: $ty:ty,
            )*
        }
        #[schema $twin_schema:tt]
        struct $twin:ident;
    ) => {
        $(#[$attr])*
        pub struct $name {
            $(
                $(#[doc = $doc])*
                $(#[serde $serde])*
                pub $field: $ty,
            )*
        }

        #[derive(serde::Deserialize, utoipa::ToSchema)]
        #[schema $twin_schema]
        #[expect(dead_code, reason = "the twin is never built: only its derived schema is used")]
        struct $twin {
            $(
                $(#[doc = $doc])*
                $(#[serde $serde])*
                $(#[schema $schema])*
                $field: $ty,
            )*
        }
    };
}
pub(crate) use twin_schema;
