//! The OpenAPI 3.1 document served at `GET /openapi.json`, generated: the
//! schemas are those of the wire types in `svc_api` (their
//! `utoipa::ToSchema`), and the operations, shared responses, headers and
//! security are built here, one function per route of
//! [`crate::routes::router`]. `tests/openapi.rs` checks the document
//! against the server's routes and real responses, and
//! `tests/python/test_schemathesis.py` runs schemathesis against it.

use std::sync::LazyLock;

use serde_json::{Value, json};
use svc_api::schema::{components, reference};
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::path::{
    Operation, OperationBuilder, Parameter, ParameterBuilder, ParameterIn,
};
use utoipa::openapi::request_body::{RequestBody, RequestBodyBuilder};
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::tag::TagBuilder;
use utoipa::openapi::{
    ComponentsBuilder, Content, ContentBuilder, Header, HeaderBuilder, HttpMethod, InfoBuilder,
    LicenseBuilder, OpenApi, OpenApiBuilder, PathItem, PathsBuilder, Ref, RefOr, Required,
    Response, ResponseBuilder, SecurityRequirement, ServerBuilder,
};

/// The document as JSON, built once; `servers` holds a placeholder that
/// [`crate::routes`] replaces with the public URL when serving it.
pub fn document() -> &'static Value {
    static DOCUMENT: LazyLock<Value> =
        LazyLock::new(|| serde_json::to_value(openapi()).unwrap_or(Value::Null));
    &DOCUMENT
}

/// The whole document.
pub fn openapi() -> OpenApi {
    let info = InfoBuilder::new()
        .title("svc")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(
            "Chat completions in the shape of OpenAI's chat-completions interface: client libraries written for it work unchanged once their base URL is `{base_url}/v1` and their API key is an svc key.\n\nEvery error is answered with the body `{\"error\":{\"message\",\"type\",\"param\",\"code\"}}` (`param` and `code` are always present, possibly null). Every response carries an `x-request-id` header; a 5xx body quotes it.",
        ))
        .license(Some(
            LicenseBuilder::new()
                .name("Apache-2.0")
                .identifier(Some("Apache-2.0"))
                .build(),
        ))
        // OpenAPI 3.1's `info.summary`, which utoipa's model lacks.
        .extensions(Some(raw([(
            "summary",
            json!("A self-hostable OpenAI-compatible chat-completion service."),
        )])))
        .build();
    let paths = PathsBuilder::new()
        .path("/health", item(HttpMethod::Get, health()))
        .path("/ready", item(HttpMethod::Get, ready()))
        .path("/openapi.json", item(HttpMethod::Get, openapi_json()))
        .path("/metrics", item(HttpMethod::Get, metrics()))
        .path("/v1/models", item(HttpMethod::Get, list_models()))
        .path(
            "/v1/models/{model}",
            item(HttpMethod::Get, retrieve_model()),
        )
        .path(
            "/v1/chat/completions",
            item(HttpMethod::Post, create_chat_completion()),
        )
        .path("/v1/responses", item(HttpMethod::Post, create_response()))
        .path(
            "/v1/responses/{response_id}",
            utoipa::openapi::path::PathItemBuilder::new()
                .operation(HttpMethod::Get, get_response())
                .operation(HttpMethod::Delete, delete_response())
                .build(),
        )
        .path("/v1/messages", item(HttpMethod::Post, create_message()))
        .path(
            "/v1/messages/count_tokens",
            item(HttpMethod::Post, count_message_tokens()),
        )
        .path(
            "/v1/auth/device/code",
            item(HttpMethod::Post, request_device_code()),
        )
        .path(
            "/v1/auth/device/token",
            item(HttpMethod::Post, poll_device_token()),
        )
        .path(
            "/.well-known/oauth-authorization-server",
            item(HttpMethod::Get, authorization_server_metadata()),
        )
        .path(
            "/v1/auth/key",
            utoipa::openapi::path::PathItemBuilder::new()
                .operation(HttpMethod::Get, get_current_key())
                .operation(HttpMethod::Delete, revoke_current_key())
                .build(),
        )
        .path("/v1/admin/usage", item(HttpMethod::Get, admin_usage()))
        .path(
            "/v1/organization/projects",
            utoipa::openapi::path::PathItemBuilder::new()
                .operation(HttpMethod::Get, list_projects())
                .operation(HttpMethod::Post, create_project())
                .build(),
        )
        .path(
            "/v1/organization/projects/{project_id}",
            utoipa::openapi::path::PathItemBuilder::new()
                .operation(HttpMethod::Get, get_project())
                .operation(HttpMethod::Post, modify_project())
                .build(),
        )
        .path(
            "/v1/organization/projects/{project_id}/api_keys",
            utoipa::openapi::path::PathItemBuilder::new()
                .operation(HttpMethod::Get, list_project_keys())
                .operation(HttpMethod::Post, create_project_key())
                .build(),
        )
        .path(
            "/v1/organization/projects/{project_id}/users",
            utoipa::openapi::path::PathItemBuilder::new()
                .operation(HttpMethod::Get, list_project_users())
                .operation(HttpMethod::Post, add_project_user())
                .build(),
        )
        .path(
            "/v1/organization/projects/{project_id}/users/{user_id}",
            item(HttpMethod::Delete, remove_project_user()),
        )
        .path(
            "/v1/organization/projects/{project_id}/api_keys/{key_id}",
            utoipa::openapi::path::PathItemBuilder::new()
                .operation(HttpMethod::Get, get_project_key())
                .operation(HttpMethod::Post, modify_project_key())
                .operation(HttpMethod::Delete, delete_project_key())
                .build(),
        )
        .path(
            "/v1/organization/projects/{project_id}/api_keys/{key_id}/rotate",
            item(HttpMethod::Post, rotate_project_key()),
        )
        .path(
            "/v1/organization/audit_logs",
            item(HttpMethod::Get, list_audit_logs()),
        )
        .path(
            "/v1/organization/usage/completions",
            item(HttpMethod::Get, usage_completions()),
        )
        .path(
            "/v1/organization/users",
            item(HttpMethod::Get, list_organization_users()),
        )
        .path(
            "/v1/organization/users/{user_id}",
            utoipa::openapi::path::PathItemBuilder::new()
                .operation(HttpMethod::Get, get_organization_user())
                .operation(HttpMethod::Post, modify_organization_user())
                .build(),
        )
        .build();
    OpenApiBuilder::new()
        .info(info)
        .servers(Some([ServerBuilder::new()
            .url("http://127.0.0.1:8080")
            .description(Some(
                "Placeholder: the server replaces `servers` with its own public URL when it serves this document at /openapi.json.",
            ))
            .build()]))
        .tags(Some([
            tag("chat", "Chat completions."),
            tag(
                "responses",
                "OpenAI's Responses API: replies with output items, streamed events and stored responses.",
            ),
            tag(
                "messages",
                "Anthropic's Messages API, on the same keys, models and limits. Its errors are `{\"type\":\"error\",\"error\":{\"type\",\"message\"},\"request_id\"}`.",
            ),
            tag("models", "The models this server serves."),
            tag("meta", "Health, readiness and this document."),
            tag(
                "auth",
                "The OAuth 2.0 device authorization flow (RFC 8628) that command-line clients use to obtain a key.",
            ),
            tag(
                "organization",
                "The admin API, in the shape of OpenAI's Administration API: projects, their keys and users, and the audit log. Admin keys only; a project owner's admin key reaches its own project, an organization owner's (or the operator's) every project.",
            ),
        ]))
        .paths(paths)
        .components(Some(shared_components()))
        .build()
}

fn tag(name: &str, description: &str) -> utoipa::openapi::Tag {
    TagBuilder::new()
        .name(name)
        .description(Some(description))
        .build()
}

fn item(method: HttpMethod, operation: Operation) -> PathItem {
    PathItem::new(method, operation)
}

/// JSON members that utoipa's model has no field for, written as they are.
fn raw<const N: usize>(pairs: [(&str, Value); N]) -> Extensions {
    pairs.into_iter().collect()
}

/// The schemas, security scheme, headers and responses that operations
/// refer to.
fn shared_components() -> utoipa::openapi::Components {
    let bearer = Http::builder()
        .scheme(HttpAuthScheme::Bearer)
        .bearer_format("sk-svc- followed by 40 hexadecimal characters")
        .description(Some("An svc API key: `Authorization: Bearer sk-svc-...`."))
        .build();
    let error = |description: &str| error_response(description).build();
    let api_key = utoipa::openapi::security::ApiKey::Header(
        utoipa::openapi::security::ApiKeyValue::with_description(
            "x-api-key",
            "An svc API key in Anthropic's header (the Messages API only).",
        ),
    );
    ComponentsBuilder::new()
        .security_scheme("bearer", SecurityScheme::Http(bearer))
        .security_scheme("apiKey", SecurityScheme::ApiKey(api_key))
        .header(
            "RequestId",
            string_header("The id of this request, as logged by the server."),
        )
        .header("RetryAfter", string_header("Seconds to wait before retrying."))
        .header(
            "WwwAuthenticate",
            string_header("The authentication scheme: `Bearer`."),
        )
        .response(
            "BadRequest",
            error(
                "The request is invalid: a body that is not JSON or not of the request schema (`code` `invalid_json`), a value out of range (`invalid_value`, with `param` naming the field), a Content-Type other than JSON (`unsupported_content_type`), or a prompt longer than the model's context (`context_length_exceeded`).",
            ),
        )
        .response(
            "Unauthorized",
            error_response(
                "The API key is missing, malformed, unknown, revoked or expired (`code` `invalid_api_key`).",
            )
            .header_ref("WWW-Authenticate", header_ref("WwwAuthenticate"))
            .build(),
        )
        .response(
            "NotFound",
            error(
                "The model does not exist, or the key may not use it (`code` `model_not_found`, `param` `model`).",
            ),
        )
        .response(
            "Forbidden",
            error(
                "The key's kind does not allow this route (`code` `insufficient_permissions`; the message names the missing scope, e.g. `Missing scopes: model.request.`).",
            ),
        )
        .response(
            "PayloadTooLarge",
            error("The request body is larger than the server's limit (`code` `request_too_large`)."),
        )
        .response(
            "TooManyRequests",
            error_response(
                "The model is overloaded (`type` `rate_limit_exceeded`, `code` `engine_overloaded`).",
            )
            .header_ref("Retry-After", header_ref("RetryAfter"))
            .build(),
        )
        .response(
            "InternalServerError",
            error("An internal error (`type` `server_error`); the message quotes the request id."),
        )
        .response(
            "ServiceUnavailable",
            error_response(
                "The model or the store is unavailable (`type` `server_error`, `code` `model_unavailable` or `service_unavailable`).",
            )
            .header_ref("Retry-After", header_ref("RetryAfter"))
            .build(),
        )
        .schemas_from_iter(components())
        .build()
}

fn string_header(description: &str) -> Header {
    HeaderBuilder::new()
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .description(Some(description))
        .build()
}

fn header_ref(name: &str) -> Ref {
    Ref::new(format!("#/components/headers/{name}"))
}

/// A response with the `x-request-id` header every response carries.
fn response(description: &str) -> ResponseBuilder {
    ResponseBuilder::new()
        .description(description)
        .header_ref("x-request-id", header_ref("RequestId"))
}

fn json(schema: impl Into<RefOr<Schema>>) -> Content {
    ContentBuilder::new().schema(Some(schema)).build()
}

/// A response whose body is JSON of `schema`.
fn json_response(description: &str, schema: impl Into<RefOr<Schema>>) -> ResponseBuilder {
    response(description).content("application/json", json(schema))
}

/// An error response: the `ErrorResponse` body.
fn error_response(description: &str) -> ResponseBuilder {
    json_response(description, reference("ErrorResponse"))
}

/// One of the shared responses of the components.
fn shared(name: &str) -> RefOr<Response> {
    RefOr::Ref(Ref::from_response_name(name))
}

/// The `Cache-Control: no-store` of the device flow's answers.
fn no_store(builder: ResponseBuilder) -> ResponseBuilder {
    let schema = svc_api::schema::keywords(
        ObjectBuilder::new().schema_type(Type::String).build(),
        [("const", json!("no-store"))],
    );
    builder.header(
        "cache-control",
        HeaderBuilder::new()
            .schema(Some(schema))
            .description(Some("Always `no-store`: token responses carry secrets."))
            .build(),
    )
}

/// An operation; `secured` ones need a bearer key, the others say
/// explicitly that they need none.
fn operation(id: &str, tag: &str, summary: &str, secured: bool) -> OperationBuilder {
    let security = if secured {
        vec![SecurityRequirement::new("bearer", Vec::<String>::new())]
    } else {
        Vec::new()
    };
    let builder = OperationBuilder::new()
        .operation_id(Some(id))
        .tag(tag)
        .summary(Some(summary))
        .securities(Some(security));
    if secured {
        builder.response("403", shared("Forbidden"))
    } else {
        builder
    }
}

fn json_body(schema: &str, required: bool) -> RequestBody {
    RequestBodyBuilder::new()
        .required(Some(if required {
            Required::True
        } else {
            Required::False
        }))
        .content("application/json", json(reference(schema)))
        .build()
}

fn health() -> Operation {
    operation("health", "meta", "Liveness: the process answers.", false)
        .response(
            "200",
            json_response("The process is up.", reference("HealthStatus")).build(),
        )
        .build()
}

fn ready() -> Operation {
    operation(
        "ready",
        "meta",
        "Readiness: the process answers and its store is reachable.",
        false,
    )
    .response(
        "200",
        json_response("Ready to serve.", reference("ReadyStatus")).build(),
    )
    .response("503", shared("ServiceUnavailable"))
    .build()
}

fn openapi_json() -> Operation {
    let schema = ObjectBuilder::new()
        .schema_type(Type::Object)
        .required("openapi")
        .required("info")
        .required("paths")
        .build();
    operation(
        "openapi",
        "meta",
        "This document, with `servers` set to the server's public URL.",
        false,
    )
    .response(
        "200",
        json_response("The OpenAPI 3.1 document.", schema).build(),
    )
    .build()
}

fn metrics() -> Operation {
    operation(
        "metrics",
        "meta",
        "Prometheus metrics: requests, latency, time to first token, gateway overhead, tokens, errors by code, connections, engine queues, upstream health.",
        false,
    )
    .description(Some(
        "Public unless the server is started with a metrics token (then `Authorization: Bearer <token>` is required; the token is not an API key) or with a metrics address of its own (then it is served only there).",
    ))
    .response("401", shared("Unauthorized"))
    .response(
        "200",
        response("The text exposition format.")
            .content(
                "text/plain",
                json(ObjectBuilder::new().schema_type(Type::String)),
            )
            .build(),
    )
    .build()
}

fn list_models() -> Operation {
    operation(
        "listModels",
        "models",
        "List the models this server serves.",
        true,
    )
    .response(
        "200",
        json_response(
            "The model list, in the server's order.",
            reference("ModelList"),
        )
        .build(),
    )
    .response("401", shared("Unauthorized"))
    .response("500", shared("InternalServerError"))
    .build()
}

fn retrieve_model() -> Operation {
    let model: Parameter = ParameterBuilder::new()
        .name("model")
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .description(Some(
            "The model id. Ids may contain `/`; the rest of the path after `/v1/models/` is the id.",
        ))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .examples(["svc"]),
        ))
        .build();
    operation("retrieveModel", "models", "One model by id.", true)
        .parameter(model)
        .response(
            "200",
            json_response("The model.", reference("Model")).build(),
        )
        .response("401", shared("Unauthorized"))
        .response("404", shared("NotFound"))
        .response("500", shared("InternalServerError"))
        .build()
}

fn create_chat_completion() -> Operation {
    operation(
        "createChatCompletion",
        "chat",
        "Create a chat completion: the model's next reply to a conversation.",
        true,
    )
    .description(Some(
        "With `stream` false or absent the reply comes whole as one `chat.completion` object. With `stream` true it comes as Server-Sent Events: `data: <chunk>` frames, each a `chat.completion.chunk` (see the `ChatCompletionChunk` schema), ending with the literal `data: [DONE]`. The first chunk's delta is `{\"role\":\"assistant\",\"content\":\"\"}`; the last chunk with a choice has an empty delta and the finish_reason. With `stream_options.include_usage` every chunk has `usage: null` and one more chunk with empty `choices` and the usage comes before `[DONE]`. An error after the stream has begun is sent as a last `data: {\"error\":{...}}` frame (the `ErrorResponse` schema) and the stream ends without `[DONE]`.",
    ))
    .request_body(Some(json_body("CreateChatCompletionRequest", true)))
    .response(
        "200",
        json_response(
            "The completion: whole, or streamed when `stream` is true.",
            reference("ChatCompletion"),
        )
        .content(
            "text/event-stream",
            json(reference("ChatCompletionStreamEvent")),
        )
        .build(),
    )
    .response("400", shared("BadRequest"))
    .response("401", shared("Unauthorized"))
    .response("404", shared("NotFound"))
    .response("413", shared("PayloadTooLarge"))
    .response("429", shared("TooManyRequests"))
    .response("500", shared("InternalServerError"))
    .response("503", shared("ServiceUnavailable"))
    .build()
}

fn create_response() -> Operation {
    operation(
        "createResponse",
        "responses",
        "Create a response (OpenAI's Responses API): the model's next output items for the input.",
        true,
    )
    .description(Some(
        "`input` is a string or a list of items (messages, `function_call`, `function_call_output`, `reasoning`), as the Responses API returns them; `instructions` goes first as a system message. Tools of type `function` are offered to the model; other tool types (`web_search`, `file_search`, `computer_use_preview`, `local_shell`, `custom`, `mcp`, ...) are accepted, returned in `tools`, and left out of the prompt, and so are reasoning items and the items of those tools in `input`.\n\nWith `stream` false or absent the reply is one `response` object. With `stream` true it comes as Server-Sent Events (see the `ResponseStreamEvent` schema): `response.created`, `response.in_progress`, then per output item `response.output_item.added`, `response.content_part.added`, deltas and their `.done`, `response.content_part.done`, `response.output_item.done`, and last `response.completed` (or `response.incomplete` when `max_output_tokens` cut it); a failure after the stream began is an `error` event and `response.failed`.\n\nWith `store` (default true) the response is kept for the key's account: `GET /v1/responses/{response_id}` reads it and `previous_response_id` continues its conversation (an unknown, expired or another account's id is 404).",
    ))
    .request_body(Some(json_body("CreateResponseRequest", true)))
    .response(
        "200",
        json_response(
            "The response: whole, or streamed when `stream` is true.",
            reference("ResponseObject"),
        )
        .content(
            "text/event-stream",
            json(reference(svc_api::responses::RESPONSE_STREAM_EVENT)),
        )
        .build(),
    )
    .response("400", shared("BadRequest"))
    .response("401", shared("Unauthorized"))
    .response(
        "404",
        error_response(
            "The model does not exist (`code` `model_not_found`), or `previous_response_id` names no stored response of this account (`code` `not_found`).",
        )
        .build(),
    )
    .response("413", shared("PayloadTooLarge"))
    .response("429", shared("TooManyRequests"))
    .response("500", shared("InternalServerError"))
    .response("503", shared("ServiceUnavailable"))
    .build()
}

fn response_id() -> Parameter {
    ParameterBuilder::new()
        .name("response_id")
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .description(Some("The id of a stored response (`resp_...`)."))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build()
}

fn get_response() -> Operation {
    operation(
        "getResponse",
        "responses",
        "A stored response of this key's account, by id.",
        true,
    )
    .parameter(response_id())
    .response(
        "200",
        json_response("The response.", reference("ResponseObject")).build(),
    )
    .response("401", shared("Unauthorized"))
    .response(
        "404",
        error_response(
            "No stored response of this account has this id (never stored, deleted, expired or another account's; `code` `not_found`).",
        )
        .build(),
    )
    .response("500", shared("InternalServerError"))
    .response("503", shared("ServiceUnavailable"))
    .build()
}

fn delete_response() -> Operation {
    operation(
        "deleteResponse",
        "responses",
        "Delete a stored response of this key's account.",
        true,
    )
    .parameter(response_id())
    .response(
        "200",
        json_response("Deleted.", reference("DeletedResponse")).build(),
    )
    .response("401", shared("Unauthorized"))
    .response(
        "404",
        error_response("No stored response of this account has this id (`code` `not_found`).")
            .build(),
    )
    .response("500", shared("InternalServerError"))
    .response("503", shared("ServiceUnavailable"))
    .build()
}

/// An error of the Messages API: Anthropic's error body.
fn anthropic_error(description: &str) -> Response {
    json_response(description, reference("AnthropicErrorResponse")).build()
}

/// The operation of a Messages route: either key header.
fn messages_operation(id: &str, summary: &str) -> OperationBuilder {
    operation(id, "messages", summary, true).securities(Some([
        SecurityRequirement::new("bearer", Vec::<String>::new()),
        SecurityRequirement::new("apiKey", Vec::<String>::new()),
    ]))
}

/// The error statuses both Messages routes answer, in Anthropic's shape.
fn messages_errors(builder: OperationBuilder) -> OperationBuilder {
    builder
        .response(
            "400",
            anthropic_error(
                "`invalid_request_error`: a body that is not JSON or not of the request schema, a value out of range (the message names the field as a path), an image or document block, or a prompt longer than the model's context.",
            ),
        )
        .response(
            "401",
            anthropic_error(
                "`authentication_error`: the key (`x-api-key` or bearer) is missing, malformed, unknown, revoked or expired.",
            ),
        )
        .response(
            "403",
            anthropic_error(
                "`permission_error`: the key's kind does not allow this route (the message names the missing scope, e.g. `model.request`).",
            ),
        )
        .response(
            "404",
            anthropic_error(
                "`not_found_error`: the model does not exist, or the key may not use it.",
            ),
        )
        .response(
            "413",
            anthropic_error(
                "`invalid_request_error`: the body is larger than the server's limit.",
            ),
        )
        .response(
            "429",
            anthropic_error("`rate_limit_error`: the key's rate limit is reached."),
        )
        .response(
            "500",
            anthropic_error("`api_error`: an internal error; the message quotes the request id."),
        )
        .response(
            "503",
            anthropic_error("`overloaded_error` (the model is unavailable) or `api_error` (the store is)."),
        )
        .response(
            "529",
            anthropic_error("`overloaded_error`: the model's queue is full."),
        )
}

fn create_message() -> Operation {
    messages_errors(messages_operation(
        "createMessage",
        "Create a message: the model's next reply, in Anthropic's Messages API.",
    ))
    .description(Some(
        "Anthropic's `POST /v1/messages`. The key comes as `x-api-key` or a bearer token; `anthropic-version`, `anthropic-beta` and `?beta=true` are accepted. Unknown fields are ignored. Tools whose `type` is neither absent nor `custom` (server tools such as web search) are accepted and left out of the prompt. `thinking` blocks come from reasoning models (`svc-thinking`) unless `thinking.type` is `disabled`. With `stream` true the reply is Server-Sent Events (`MessageStreamSseEvent`); an error after the stream has begun is a last `event: error`. The `message_start` event's usage is 0: the counts come in `message_delta`.",
    ))
    .request_body(Some(json_body("CreateMessageRequest", true)))
    .response(
        "200",
        json_response(
            "The message: whole, or streamed when `stream` is true.",
            reference("MessageResponse"),
        )
        .content(
            "text/event-stream",
            json(reference(svc_api::messages::STREAM_EVENT)),
        )
        .build(),
    )
    .build()
}

fn count_message_tokens() -> Operation {
    messages_errors(messages_operation(
        "countMessageTokens",
        "Count the tokens a Messages request's prompt uses.",
    ))
    .description(Some(
        "The system prompt, messages and tools as the model's engine counts them: exact for the embedded engine (the chat template rendered and tokenized as a generation would be), an estimate for upstream models (a token per 4 bytes of text and tool schemas, and 4 a message).",
    ))
    .request_body(Some(json_body("CountTokensRequest", true)))
    .response(
        "200",
        json_response("The count.", reference("CountTokensResponse")).build(),
    )
    .build()
}

fn request_device_code() -> Operation {
    let body = RequestBodyBuilder::new()
        .required(Some(Required::False))
        .content(
            "application/x-www-form-urlencoded",
            json(reference("DeviceCodeRequest")),
        )
        .content("application/json", json(reference("DeviceCodeRequest")))
        .build();
    operation(
        "requestDeviceCode",
        "auth",
        "Start a device login: get a device code to poll with and a user code to show.",
        false,
    )
    .description(Some(
        "No body is needed (the spec's form). An RFC 8628 form body with `client_id` and `scope`, or the same as JSON, is accepted; both are shown to the person approving.",
    ))
    .request_body(Some(body))
    .response(
        "200",
        no_store(json_response(
            "The device authorization record.",
            reference("DeviceCodeResponse"),
        ))
        .build(),
    )
    .response("400", shared("BadRequest"))
    .response("413", shared("PayloadTooLarge"))
    .response(
        "429",
        error_response(
            "Too many codes requested from this client address or from everyone (`type` `requests`, `code` `slow_down`; a form request gets RFC 6749's `{\"error\":\"slow_down\"}`), or too many codes are live.",
        )
        .header_ref("Retry-After", header_ref("RetryAfter"))
        .build(),
    )
    .response("500", shared("InternalServerError"))
    .build()
}

fn poll_device_token() -> Operation {
    let body = RequestBodyBuilder::new()
        .required(Some(Required::True))
        .content("application/json", json(reference("DeviceTokenRequest")))
        .content(
            "application/x-www-form-urlencoded",
            json(reference("OAuthDeviceTokenRequest")),
        )
        .build();
    let either = |a: &str, b: &str| -> Schema {
        OneOfBuilder::new()
            .item(reference(a))
            .item(reference(b))
            .into()
    };
    operation(
        "pollDeviceToken",
        "auth",
        "Poll for the key of a device login.",
        false,
    )
    .description(Some(
        "JSON body (the spec's dialect): `{\"status\":\"pending\"}` until the person approves, then once `{\"status\":\"approved\",\"access_token\",\"token_type\":\"bearer\",\"expires_in\"}`. Other states are 400s in the usual error shape whose `code` is the RFC 8628 name: `slow_down` (poll less often: the interval grew by 5 s), `access_denied`, `expired_token`, `invalid_grant` (unknown code, or its key was issued already).\n\nForm body (RFC 8628 section 3.4, for standard OAuth clients): `grant_type=urn:ietf:params:oauth:grant-type:device_code&device_code=...` answers with RFC 6749's bodies: `{\"access_token\",\"token_type\",\"expires_in\"}`, or 400 `{\"error\":\"authorization_pending\"|\"slow_down\"|\"access_denied\"|\"expired_token\"|\"invalid_grant\"|\"invalid_request\"|\"unsupported_grant_type\"}`.",
    ))
    .request_body(Some(body))
    .response(
        "200",
        no_store(json_response(
            "Pending or approved (JSON dialect), or the RFC 6749 token (form dialect).",
            either("DeviceTokenResponse", "OAuthTokenResponse"),
        ))
        .build(),
    )
    .response(
        "400",
        no_store(json_response(
            "Not an answer yet or never: an error in the usual shape (JSON dialect, `code` as above) or RFC 6749's error body (form dialect).",
            either("ErrorResponse", "OAuthError"),
        ))
        .build(),
    )
    .response("413", shared("PayloadTooLarge"))
    .response("500", shared("InternalServerError"))
    .build()
}

fn authorization_server_metadata() -> Operation {
    let cache_control = svc_api::schema::keywords(
        ObjectBuilder::new().schema_type(Type::String).build(),
        [("const", json!(crate::routes::METADATA_CACHE_CONTROL))],
    );
    operation(
        "getAuthorizationServerMetadata",
        "auth",
        "OAuth 2.0 authorization server metadata (RFC 8414), so that standard OAuth clients discover the device flow.",
        false,
    )
    .description(Some(
        "`issuer` is the server's public URL; `device_authorization_endpoint` and `token_endpoint` are the two device flow routes under it. The only grant is the device code grant (RFC 8628), clients are public (`token_endpoint_auth_methods_supported: [\"none\"]`), and there is no authorization endpoint (`response_types_supported: []`).",
    ))
    .response(
        "200",
        json_response("The metadata.", reference("AuthorizationServerMetadata"))
            .header(
                "cache-control",
                HeaderBuilder::new()
                    .schema(Some(cache_control))
                    .description(Some(
                        "Cacheable: the metadata changes only when the server restarts with another public URL.",
                    ))
                    .build(),
            )
            .build(),
    )
    .build()
}

fn get_current_key() -> Operation {
    operation(
        "getCurrentKey",
        "auth",
        "Describe the presented key and its owner (who a client is logged in as).",
        true,
    )
    .response(
        "200",
        json_response("The key (never its secret).", reference("ApiKey")).build(),
    )
    .response("401", shared("Unauthorized"))
    .response("500", shared("InternalServerError"))
    .build()
}

fn revoke_current_key() -> Operation {
    operation(
        "revokeCurrentKey",
        "auth",
        "Revoke the presented key (log out). The next request with it gets 401.",
        true,
    )
    .response(
        "200",
        json_response("Revoked.", reference("RevokedKey")).build(),
    )
    .response("401", shared("Unauthorized"))
    .response("500", shared("InternalServerError"))
    .build()
}

fn admin_usage() -> Operation {
    let days: Parameter = ParameterBuilder::new()
        .name("days")
        .parameter_in(ParameterIn::Query)
        .required(Required::False)
        .description(Some(
            "Days back from today, today included (1 to 400; default 30).",
        ))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1))
                .maximum(Some(crate::routes::MAX_USAGE_DAYS)),
        ))
        .build();
    operation(
        "adminUsage",
        "auth",
        "Requests and tokens per key per UTC day, for every key (admin accounts' keys only).",
        true,
    )
    .parameter(days)
    .response(
        "200",
        json_response("Usage rows, by day then key.", reference("UsageList")).build(),
    )
    .response("400", shared("BadRequest"))
    .response("401", shared("Unauthorized"))
    .response(
        "403",
        error_response(
            "The key does not belong to an admin account (`code` `insufficient_permissions`).",
        )
        .build(),
    )
    .response("500", shared("InternalServerError"))
    .build()
}

fn project_id() -> Parameter {
    ParameterBuilder::new()
        .name("project_id")
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .description(Some("The id of a project (`proj_...`)."))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build()
}

fn key_id() -> Parameter {
    ParameterBuilder::new()
        .name("key_id")
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .description(Some("The id of a key (`key_...`)."))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build()
}

/// `limit` and `after`, OpenAI's cursor.
fn page_parameters(builder: OperationBuilder) -> OperationBuilder {
    let limit = ParameterBuilder::new()
        .name("limit")
        .parameter_in(ParameterIn::Query)
        .required(Required::False)
        .description(Some("Items per page (1 to 100; default 20)."))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1))
                .maximum(Some(100)),
        ))
        .build();
    let after = ParameterBuilder::new()
        .name("after")
        .parameter_in(ParameterIn::Query)
        .required(Required::False)
        .description(Some(
            "The `last_id` of the previous page: this page starts after that item.",
        ))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build();
    builder.parameter(limit).parameter(after)
}

/// The answers every admin API operation may give besides its own.
fn admin_errors(builder: OperationBuilder) -> OperationBuilder {
    builder
        .response("401", shared("Unauthorized"))
        .response(
            "403",
            error_response(
                "Not an admin key, or an admin key that does not reach this (`code` `insufficient_permissions`).",
            )
            .build(),
        )
        .response("500", shared("InternalServerError"))
        .response("503", shared("ServiceUnavailable"))
}

fn project_not_found() -> Response {
    error_response(
        "No project the key reaches has this id (`code` `not_found`): another project's id is answered the same.",
    )
    .build()
}

fn key_not_found() -> Response {
    error_response(
        "The project or the key is not found in what the admin key reaches (`code` `not_found`).",
    )
    .build()
}

fn list_projects() -> Operation {
    admin_errors(page_parameters(operation(
        "listProjects",
        "organization",
        "The projects this admin key reaches, oldest first.",
        true,
    )))
    .response(
        "200",
        json_response("A page of projects.", reference("ProjectList")).build(),
    )
    .response("400", shared("BadRequest"))
    .build()
}

fn create_project() -> Operation {
    admin_errors(operation(
        "createProject",
        "organization",
        "Create a project (an organization owner's or the operator's admin key).",
        true,
    ))
    .request_body(Some(json_body("CreateProjectRequest", true)))
    .response(
        "200",
        json_response("The project.", reference("Project")).build(),
    )
    .response("400", shared("BadRequest"))
    .build()
}

fn get_project() -> Operation {
    admin_errors(operation(
        "getProject",
        "organization",
        "A project, by id.",
        true,
    ))
    .parameter(project_id())
    .response(
        "200",
        json_response("The project.", reference("Project")).build(),
    )
    .response("404", project_not_found())
    .build()
}

fn list_project_keys() -> Operation {
    admin_errors(page_parameters(operation(
        "listProjectApiKeys",
        "organization",
        "A project's keys (never their secrets), newest first, revoked ones included.",
        true,
    )))
    .parameter(project_id())
    .response(
        "200",
        json_response("A page of keys.", reference("ProjectApiKeyList")).build(),
    )
    .response("400", shared("BadRequest"))
    .response("404", project_not_found())
    .build()
}

fn create_project_key() -> Operation {
    admin_errors(operation(
        "createProjectApiKey",
        "organization",
        "Create a key in the project for the admin key's owner; its secret is in `value`, this once.",
        true,
    ))
    .parameter(project_id())
    .request_body(Some(json_body("CreateProjectApiKeyRequest", true)))
    .response(
        "200",
        json_response("The key, with `value`.", reference("ProjectApiKey")).build(),
    )
    .response("400", shared("BadRequest"))
    .response("404", project_not_found())
    .build()
}

fn get_project_key() -> Operation {
    admin_errors(operation(
        "getProjectApiKey",
        "organization",
        "A key of the project, by id (never its secret).",
        true,
    ))
    .parameter(project_id())
    .parameter(key_id())
    .response(
        "200",
        json_response("The key.", reference("ProjectApiKey")).build(),
    )
    .response("404", key_not_found())
    .build()
}

fn modify_project_key() -> Operation {
    admin_errors(operation(
        "modifyProjectApiKey",
        "organization",
        "Set or remove a key's token budget (svc's own); the key follows from its next request, on every replica.",
        true,
    ))
    .parameter(project_id())
    .parameter(key_id())
    .request_body(Some(json_body("ModifyProjectApiKeyRequest", true)))
    .response(
        "200",
        json_response("The key.", reference("ProjectApiKey")).build(),
    )
    .response("400", shared("BadRequest"))
    .response(
        "404",
        error_response(
            "The project or the key is not found in what the admin key reaches (`code` `not_found`).",
        )
        .build(),
    )
    .build()
}

fn delete_project_key() -> Operation {
    admin_errors(operation(
        "deleteProjectApiKey",
        "organization",
        "Revoke a key of the project: refused from its next request, on every replica; its record stays, `revoked`.",
        true,
    ))
    .parameter(project_id())
    .parameter(key_id())
    .response(
        "200",
        json_response("Revoked.", reference("DeletedProjectApiKey")).build(),
    )
    .response("404", key_not_found())
    .build()
}

fn list_project_users() -> Operation {
    admin_errors(page_parameters(operation(
        "listProjectUsers",
        "organization",
        "A project's members and their roles, oldest first.",
        true,
    )))
    .parameter(project_id())
    .response(
        "200",
        json_response("A page of members.", reference("ProjectUserList")).build(),
    )
    .response("400", shared("BadRequest"))
    .response("404", project_not_found())
    .build()
}

fn remove_project_user() -> Operation {
    admin_errors(operation(
        "deleteProjectUser",
        "organization",
        "Remove an account from the project (never its last owner); its keys stay as they are.",
        true,
    ))
    .parameter(project_id())
    .parameter(user_id_parameter())
    .response(
        "200",
        json_response("Removed.", reference("DeletedProjectUser")).build(),
    )
    .response("400", shared("BadRequest"))
    .response(
        "404",
        error_response(
            "No project the key reaches has this id, or the account is not a member (`code` `not_found`).",
        )
        .build(),
    )
    .build()
}

fn add_project_user() -> Operation {
    admin_errors(operation(
        "createProjectUser",
        "organization",
        "Add an account to the project with a role, or change its role there.",
        true,
    ))
    .parameter(project_id())
    .request_body(Some(json_body("CreateProjectUserRequest", true)))
    .response(
        "200",
        json_response("The member.", reference("ProjectUser")).build(),
    )
    .response("400", shared("BadRequest"))
    .response(
        "404",
        error_response(
            "No project the key reaches has this id, or no account has this `user_id` (`code` `not_found`).",
        )
        .build(),
    )
    .build()
}

fn modify_project() -> Operation {
    admin_errors(operation(
        "modifyProject",
        "organization",
        "Rename a project or set its allowed models (an organization owner's or the operator's admin key); keys follow from their next request.",
        true,
    ))
    .parameter(project_id())
    .request_body(Some(json_body("ModifyProjectRequest", true)))
    .response(
        "200",
        json_response("The project.", reference("Project")).build(),
    )
    .response("400", shared("BadRequest"))
    .response("404", project_not_found())
    .build()
}

fn rotate_project_key() -> Operation {
    admin_errors(operation(
        "rotateProjectApiKey",
        "organization",
        "Rotate a key of the project (svc's own): a new key with the same project, owner, kind, permissions, models, rate limits and name, its secret in `value` this once and `rotated_from` naming the old one; the old key keeps working for `grace_period_seconds` (default 86400), then is refused as expired.",
        true,
    ))
    .parameter(project_id())
    .parameter(key_id())
    .request_body(Some(json_body("RotateProjectApiKeyRequest", true)))
    .response(
        "200",
        json_response("The new key, with `value`.", reference("ProjectApiKey")).build(),
    )
    .response(
        "400",
        error_response(
            "A grace period out of range (`param` `grace_period_seconds`), or a key that is not active (`param` `key_id`).",
        )
        .build(),
    )
    .response("404", key_not_found())
    .build()
}

/// An optional query parameter `name` of `schema`.
fn list_organization_users() -> Operation {
    admin_errors(page_parameters(operation(
        "listOrganizationUsers",
        "organization",
        "The organization's accounts, oldest first, with their role (`owner`: an admin account; `reader`). An organization owner's or the operator's admin key.",
        true,
    )))
    .response(
        "200",
        json_response("A page of accounts.", reference("OrganizationUserList")).build(),
    )
    .response("400", shared("BadRequest"))
    .build()
}

fn user_id_parameter() -> Parameter {
    ParameterBuilder::new()
        .name("user_id")
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .description(Some("`usr_` + 16 hex."))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build()
}

fn modify_organization_user() -> Operation {
    admin_errors(operation(
        "modifyOrganizationUser",
        "organization",
        "Make an account an organization owner (an admin) or a reader; the last enabled owner stays one. Its admin keys follow from their next request, on every replica.",
        true,
    ))
    .parameter(user_id_parameter())
    .request_body(Some(json_body("ModifyOrganizationUserRequest", true)))
    .response(
        "200",
        json_response("The account.", reference("OrganizationUser")).build(),
    )
    .response(
        "400",
        error_response("`role` is not owner or reader, or the account is the last owner (`param` `role`).").build(),
    )
    .response(
        "404",
        error_response("No account with that id (`code` `not_found`).").build(),
    )
    .build()
}

fn get_organization_user() -> Operation {
    admin_errors(operation(
        "getOrganizationUser",
        "organization",
        "One account of the organization.",
        true,
    ))
    .parameter(user_id_parameter())
    .response(
        "200",
        json_response("The account.", reference("OrganizationUser")).build(),
    )
    .response(
        "404",
        error_response("No account with that id (`code` `not_found`).").build(),
    )
    .build()
}

fn usage_completions() -> Operation {
    let unix = || {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::Int64,
            )))
            .minimum(Some(0))
    };
    let start = ParameterBuilder::new()
        .name("start_time")
        .parameter_in(ParameterIn::Query)
        .required(Required::True)
        .description(Some("Unix time: usage from 00:00 UTC of this day on."))
        .schema(Some(unix()))
        .build();
    let group_by = query_parameter(
        "group_by[]",
        "Group each day's usage by these fields (the others are null).",
        utoipa::openapi::schema::ArrayBuilder::new().items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["project_id", "api_key_id", "model"])),
        ),
    );
    let limit = query_parameter(
        "limit",
        "Day buckets a page: 1 to 31, default 7.",
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(1))
            .maximum(Some(31)),
    );
    admin_errors(operation(
        "usageCompletions",
        "organization",
        "Requests and tokens by UTC day, optionally grouped and filtered by project, key and model, in OpenAI's usage shape. Usage from before migration 0011 has no model and is not here. A project owner's admin key sees its project's usage only.",
        true,
    ))
    .parameter(start)
    .parameter(query_parameter(
        "end_time",
        "Unix time: usage before this (default: now).",
        unix(),
    ))
    .parameter(query_parameter(
        "bucket_width",
        "`1d` (svc counts usage by day).",
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(["1d"])),
    ))
    .parameter(group_by)
    .parameter(list_parameter("project_ids", "Only these projects."))
    .parameter(list_parameter("api_key_ids", "Only these keys."))
    .parameter(list_parameter("models", "Only these models."))
    .parameter(limit)
    .parameter(query_parameter(
        "page",
        "The `next_page` of the previous page.",
        ObjectBuilder::new().schema_type(Type::String),
    ))
    .response(
        "200",
        json_response("Day buckets.", reference("UsageCompletionsPage")).build(),
    )
    .response(
        "400",
        error_response(
            "A parameter out of range; `param` names it (`start_time`, `end_time`, `bucket_width`, `group_by`, `limit`, `page`).",
        )
        .build(),
    )
    .build()
}

fn query_parameter(
    name: &str,
    description: &str,
    schema: impl Into<utoipa::openapi::RefOr<utoipa::openapi::Schema>>,
) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Query)
        .required(Required::False)
        .description(Some(description))
        .schema(Some(schema))
        .build()
}

/// A list of strings in the query (`name[]`, repeated).
fn list_parameter(name: &str, description: &str) -> Parameter {
    let strings = utoipa::openapi::schema::ArrayBuilder::new()
        .items(ObjectBuilder::new().schema_type(Type::String));
    query_parameter(&format!("{name}[]"), description, strings)
}

/// `effective_at[op]`, a Unix time bound.
fn time_parameter(op: &str, description: &str) -> Parameter {
    let integer = ObjectBuilder::new().schema_type(Type::Integer);
    query_parameter(&format!("effective_at[{op}]"), description, integer)
}

fn list_audit_logs() -> Operation {
    let event_types = query_parameter(
        "event_types[]",
        "Only events of these types.",
        utoipa::openapi::schema::ArrayBuilder::new().items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(svc_core::audit::EVENT_TYPES.iter().copied())),
        ),
    );
    let before = query_parameter(
        "before",
        "The `first_id` of a page: this page holds the entries just newer than that one.",
        ObjectBuilder::new().schema_type(Type::String),
    );
    admin_errors(page_parameters(operation(
        "listAuditLogs",
        "organization",
        "The audit log, newest first: sign-ins and sign-outs, keys created, rotated and revoked, rate-limit changes, device approvals and denials, project, user and membership changes. Never a secret. A project owner's admin key sees its project's entries only.",
        true,
    )))
    .parameter(event_types)
    .parameter(list_parameter(
        "actor_ids",
        "Only events by these accounts (`usr_...`) or keys (`key_...`).",
    ))
    .parameter(list_parameter(
        "actor_emails",
        "Only events by accounts with these emails.",
    ))
    .parameter(list_parameter(
        "project_ids",
        "Only events in these projects.",
    ))
    .parameter(time_parameter("gt", "Only events after this Unix time."))
    .parameter(time_parameter("gte", "Only events at or after this Unix time."))
    .parameter(time_parameter("lt", "Only events before this Unix time."))
    .parameter(time_parameter("lte", "Only events at or before this Unix time."))
    .parameter(before)
    .response(
        "200",
        json_response("A page of entries.", reference("AuditLogList")).build(),
    )
    .response(
        "400",
        error_response(
            "A filter or `limit` out of range; `param` names it (`event_types[]`, `effective_at[gt]`, `limit`).",
        )
        .build(),
    )
    .build()
}
