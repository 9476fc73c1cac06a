//! The OpenAPI 3.1 document served at `GET /openapi.json`. Each operation is
//! declared on its handler (`#[utoipa::path]`, with the permission its key
//! needs as the security requirement's scope) and collected by the router,
//! which builds the document (`routes::openapi`); the schemas are those of
//! the wire types in `svc_api`. Here, below every handler: the document's
//! frame (info, tags, servers), the responses, headers and security
//! schemes operations share ([`shared`], [`schemas`]), and the rules every
//! operation follows ([`framed`]). `tests/openapi.rs` holds a snapshot of it and
//! checks it against real responses; `tests/python/test_schemathesis.py`
//! runs schemathesis against it.

pub(crate) mod schemas;
pub(crate) mod shared;

use serde_json::json;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::tag::TagBuilder;
use utoipa::openapi::{
    Header, HeaderBuilder, LicenseBuilder, OpenApi, Ref, RefOr, Required, ServerBuilder,
};

use crate::endpoint::Endpoint;

/// The whole document: the operations of the API's routes (`api`) and of
/// `/metrics` (`metrics`), each following the rules, in their frame, with
/// the endpoints' tags in this order and their generating operations
/// marked.
pub(crate) fn framed(mut api: OpenApi, metrics: OpenApi, endpoints: &[&Endpoint]) -> OpenApi {
    api.info.title = "svc".into();
    api.info.version = env!("CARGO_PKG_VERSION").into();
    api.info.description = Some(DESCRIPTION.into());
    api.info.license = Some(
        LicenseBuilder::new()
            .name("Apache-2.0")
            .identifier(Some("Apache-2.0"))
            .build(),
    );
    // OpenAPI 3.1's `info.summary`, which utoipa's model lacks.
    api.info.extensions = Some(
        [("summary".to_owned(), json!(SUMMARY))]
            .into_iter()
            .collect(),
    );
    api.info.contact = None;
    api.servers = Some(vec![ServerBuilder::new().url("http://127.0.0.1:8080").description(Some(
        "Placeholder: the server replaces `servers` with its own public URL when it serves this document at /openapi.json.",
    )).build()]);
    api.tags = Some(
        endpoints
            .iter()
            .map(|endpoint| {
                TagBuilder::new()
                    .name(endpoint.tag)
                    .description(Some(endpoint.about))
                    .build()
            })
            .collect(),
    );
    api.components = Some(components(api.components.take().unwrap_or_default()));
    api.paths.paths.extend(metrics.paths.paths);
    for (path, mut item) in std::mem::take(&mut api.paths.paths) {
        operations(&mut item).for_each(follow_the_rules);
        for operation in operations(&mut item) {
            let id = operation.operation_id.as_deref().unwrap_or_default();
            if endpoints.iter().any(|e| e.generates == Some(id)) {
                generating(operation);
            }
        }
        // A catch-all (`{*model}`) is a plain parameter to OpenAPI.
        api.paths.paths.insert(path.replace("{*", "{"), item);
    }
    api
}

/// What every operation says the same way: each answer carries the request
/// id; `Retry-After` is the shared header; a body that may be left out
/// (`Option<T>` on the handler) is not required rather than `null`; and an
/// operation without security says so (`security: []`).
fn follow_the_rules(operation: &mut utoipa::openapi::path::Operation) {
    for response in operation.responses.responses.values_mut() {
        if let RefOr::T(response) = response {
            response
                .headers
                .entry("x-request-id".into())
                .or_insert_with(request_id_header);
            if let Some(retry) = response.headers.get_mut("Retry-After") {
                *retry = RefOr::Ref(Ref::new("#/components/headers/RetryAfter"));
            }
        }
    }
    if let Some(RefOr::T(body)) = &mut operation.request_body {
        for content in body.content.values_mut() {
            let RefOr::T(content) = content else { continue };
            if let Some(RefOr::T(Schema::OneOf(one_of))) = &content.schema
                && let [item, RefOr::T(Schema::Object(null))] = one_of.items.as_slice()
                && null.schema_type == Type::Null.into()
            {
                content.schema = Some(item.clone());
                body.required = Some(Required::False);
            }
        }
    }
    operation.security.get_or_insert_with(Vec::new);
}

/// An operation that generates (an endpoint's [`Endpoint::generates`])
/// says which model served the reply and whether it came from the
/// response cache, and takes the caller's `Cache-Control`.
fn generating(operation: &mut utoipa::openapi::path::Operation) {
    if let Some(RefOr::T(ok)) = operation.responses.responses.get_mut("200") {
        for (name, component) in [
            ("x-svc-served-model", "ServedModel"),
            ("x-svc-cache", "Cache"),
        ] {
            let reference = Ref::new(format!("#/components/headers/{component}"));
            ok.headers.insert(name.into(), RefOr::Ref(reference));
        }
    }
    let cache_control = utoipa::openapi::path::ParameterBuilder::new()
        .name("Cache-Control")
        .parameter_in(utoipa::openapi::path::ParameterIn::Header)
        .required(Required::False)
        .description(Some(
            "The response cache (with `response_cache_ttl`, for requests with `temperature` 0 or a `seed`): `no-cache` asks the model again (its reply is kept), `no-store` neither reads nor keeps, `only-if-cached` answers from the cache or with a 504.",
        ))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build();
    operation
        .parameters
        .get_or_insert_with(Vec::new)
        .push(RefOr::T(cache_control));
}

const SUMMARY: &str = "A self-hostable OpenAI-compatible chat-completion service.";
const DESCRIPTION: &str = "Chat completions in the shape of OpenAI's chat-completions interface: client libraries written for it work unchanged once their base URL is `{base_url}/v1` and their API key is an svc key.\n\nEvery error is answered with the body `{\"error\":{\"message\",\"type\",\"param\",\"code\"}}` (`param` and `code` are always present, possibly null). Every response carries an `x-request-id` header; a 5xx body quotes it.";

fn operations(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        &mut item.get,
        &mut item.post,
        &mut item.delete,
        &mut item.put,
        &mut item.patch,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

pub(crate) fn request_id_header() -> RefOr<Header> {
    RefOr::Ref(Ref::new("#/components/headers/RequestId"))
}

/// The schemas the router collected (those the operations name, and
/// those these refer to), and the security schemes, headers and responses
/// operations share.
fn components(mut components: utoipa::openapi::Components) -> utoipa::openapi::Components {
    let bearer = Http::builder()
        .scheme(HttpAuthScheme::Bearer)
        .bearer_format("sk-svc- followed by 40 hexadecimal characters")
        .description(Some("An svc API key: `Authorization: Bearer sk-svc-...`."))
        .build();
    let api_key = ApiKey::Header(ApiKeyValue::with_description(
        "x-api-key",
        "An svc API key in Anthropic's header (the Messages API only).",
    ));
    components.add_security_scheme("bearer", SecurityScheme::Http(bearer));
    components.add_security_scheme("apiKey", SecurityScheme::ApiKey(api_key));
    for (name, about) in [
        (
            "RequestId",
            "The id of this request, as logged by the server.",
        ),
        ("RetryAfter", "Seconds to wait before retrying."),
        ("WwwAuthenticate", "The authentication scheme: `Bearer`."),
        (
            "ServedModel",
            "The model that served the reply: the one asked for, or one of its fallbacks when it failed before answering.",
        ),
        (
            "Cache",
            "`hit` when the reply came from the response cache (the same bytes as when it was made), `miss` when it was made now and kept; absent when the request is not cached.",
        ),
    ] {
        let header = HeaderBuilder::new()
            .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
            .description(Some(about))
            .build();
        components.headers.insert(name.into(), RefOr::T(header));
    }
    for (name, response) in shared::all() {
        components.responses.insert(name.into(), response);
    }
    components
}

pub(crate) use schemas::{NoStore, json_schemas, parameters};
