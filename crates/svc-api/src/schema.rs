//! Building blocks of the wire types' OpenAPI schemas: what the
//! `#[derive(ToSchema)]` attributes cannot say (a `const`, JSON Schema
//! 2020-12 keywords such as `if`/`then`, `null`), and the list of every
//! named schema the document holds ([`components`]).

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

/// Every named schema of the API, by name: those of the types the server
/// answers with and reads, and those they refer to.
pub fn components() -> Vec<(String, RefOr<Schema>)> {
    let mut out = every_component();
    // Each once, in first-seen order (a type's schema is reached once per
    // type that refers to it).
    let mut seen = std::collections::HashSet::new();
    out.retain(|(name, _)| seen.insert(name.clone()));
    out
}

/// [`components`] with repeats.
fn every_component() -> Vec<(String, RefOr<Schema>)> {
    let mut out = Vec::new();
    fn add<T: ToSchema>(out: &mut Vec<(String, RefOr<Schema>)>) {
        out.push((T::name().into_owned(), <T as PartialSchema>::schema()));
        T::schemas(out);
    }
    add::<crate::ErrorBody>(&mut out);
    add::<crate::HealthStatus>(&mut out);
    add::<crate::ReadyStatus>(&mut out);
    add::<crate::ModelList>(&mut out);
    // The request's schema with the rules between its fields.
    out.push((
        crate::ChatCompletionRequest::name().into_owned(),
        crate::chat::request_schema(),
    ));
    crate::ChatCompletionRequest::schemas(&mut out);
    add::<crate::Message>(&mut out);
    // Fields whose schema is written out in place (a union with null)
    // still refer to these.
    crate::ToolChoice::schemas(&mut out);
    crate::ResponseFormat::schemas(&mut out);
    add::<crate::ChatCompletion>(&mut out);
    add::<crate::ChatCompletionChunk>(&mut out);
    out.push((
        crate::chat::STREAM_EVENT.to_owned(),
        crate::chat::stream_event_schema(),
    ));
    responses(&mut out);
    add::<crate::completions::CompletionRequest>(&mut out);
    add::<crate::completions::Completion>(&mut out);
    add::<crate::completions::CompletionStreamEvent>(&mut out);
    add::<crate::embeddings::EmbeddingRequest>(&mut out);
    add::<crate::embeddings::EmbeddingList>(&mut out);
    add::<crate::batches::UploadFile>(&mut out);
    add::<crate::batches::FileObject>(&mut out);
    add::<crate::batches::FileList>(&mut out);
    add::<crate::batches::DeletedFile>(&mut out);
    add::<crate::batches::CreateBatchRequest>(&mut out);
    add::<crate::batches::Batch>(&mut out);
    add::<crate::batches::BatchList>(&mut out);
    add::<crate::messages::MessagesRequest>(&mut out);
    add::<crate::messages::CountTokensRequest>(&mut out);
    add::<crate::messages::CountTokensResponse>(&mut out);
    add::<crate::messages::MessageReply>(&mut out);
    add::<crate::messages::MessageStreamEvent>(&mut out);
    add::<crate::messages::AnthropicErrorBody>(&mut out);
    out.push((
        crate::messages::STREAM_EVENT.to_owned(),
        crate::messages::stream_event_schema(),
    ));
    add::<crate::DeviceCodeRequest>(&mut out);
    add::<crate::DeviceCodeResponse>(&mut out);
    add::<crate::DeviceTokenRequest>(&mut out);
    add::<crate::OAuthDeviceTokenRequest>(&mut out);
    add::<crate::DeviceTokenResponse>(&mut out);
    add::<crate::OAuthTokenResponse>(&mut out);
    add::<crate::OAuthErrorResponse>(&mut out);
    add::<crate::AuthorizationServerMetadata>(&mut out);
    add::<crate::KeyInfo>(&mut out);
    add::<crate::KeyOwner>(&mut out);
    add::<crate::RevokedKey>(&mut out);
    add::<crate::UsageList>(&mut out);
    add::<crate::ProjectList>(&mut out);
    add::<crate::CreateProjectRequest>(&mut out);
    add::<crate::ModifyProjectRequest>(&mut out);
    add::<crate::ModifyProjectApiKeyRequest>(&mut out);
    add::<crate::BudgetLimit>(&mut out);
    add::<crate::UsageCompletionsPage>(&mut out);
    add::<crate::OrganizationUserList>(&mut out);
    add::<crate::ModifyOrganizationUserRequest>(&mut out);
    add::<crate::BudgetStatus>(&mut out);
    add::<crate::ProjectApiKeyList>(&mut out);
    add::<crate::CreateProjectApiKeyRequest>(&mut out);
    add::<crate::DeletedProjectApiKey>(&mut out);
    add::<crate::DeletedProjectUser>(&mut out);
    add::<crate::ProjectUserList>(&mut out);
    add::<crate::CreateProjectUserRequest>(&mut out);
    add::<crate::RotateProjectApiKeyRequest>(&mut out);
    add::<crate::AuditLogList>(&mut out);
    add::<crate::RequestLogList>(&mut out);
    out
}

/// The Responses API's schemas (`POST /v1/responses`).
fn responses(out: &mut Vec<(String, RefOr<Schema>)>) {
    use crate::responses as r;
    fn add<T: ToSchema>(out: &mut Vec<(String, RefOr<Schema>)>) {
        out.push((T::name().into_owned(), <T as PartialSchema>::schema()));
        T::schemas(out);
    }
    add::<r::CreateResponseRequest>(out);
    add::<r::InputItem>(out);
    add::<r::InputPart>(out);
    add::<r::ResponseTool>(out);
    add::<r::ResponseObject>(out);
    add::<r::OutputItem>(out);
    add::<r::DeletedResponse>(out);
    out.push((
        r::RESPONSE_STREAM_EVENT.to_owned(),
        r::stream_event_schema(),
    ));
}

/// A type for a schema that no Rust type carries (the server writes the
/// frames of a stream itself), so that an operation can name it:
/// `name` is the component's, `schema` builds it.
macro_rules! named_schema {
    ($(#[$doc:meta])* $ty:ident = $name:expr, $schema:path) => {
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
        }
    };
}
pub(crate) use named_schema;

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Two types of one name would hide one of them.
    #[test]
    fn a_name_repeats_only_with_the_same_schema() {
        let mut by_name = HashMap::new();
        for (name, schema) in every_component() {
            let json = serde_json::to_value(&schema).unwrap_or_default();
            if let Some(before) = by_name.insert(name.clone(), json.clone()) {
                assert_eq!(before, json, "two schemas named {name}");
            }
        }
        assert_eq!(by_name.len(), components().len());
    }
}
