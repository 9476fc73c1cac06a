//! The responses operations share: named ones in the components, for
//! `response = shared::X` in a `#[utoipa::path]`, and the error body with
//! the request id that each of them, and many an operation's own, is.

use utoipa::ToResponse;
use utoipa::ToSchema;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};

/// A response whose body is the `ErrorResponse`, with a header referred to
/// from the components when `header` names one.
pub(crate) fn error_response(description: &str, header: Option<(&str, &str)>) -> Response {
    let body = RefOr::Ref(Ref::from_schema_name(svc_api::ErrorBody::name()));
    let mut response = ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new().schema(Some(body)).build(),
        )
        .build();
    response
        .headers
        .insert("x-request-id".into(), crate::openapi::request_id_header());
    if let Some((name, component)) = header {
        let reference = Ref::new(format!("#/components/headers/{component}"));
        response.headers.insert(name.into(), RefOr::Ref(reference));
    }
    response
}

macro_rules! shared {
    ($($name:ident ($header:expr) => $description:expr;)*) => {
        $(
            #[doc = $description]
            pub(crate) struct $name;
            impl<'s> ToResponse<'s> for $name {
                fn response() -> (&'s str, RefOr<Response>) {
                    (stringify!($name), RefOr::T(error_response($description, $header)))
                }
            }
        )*
        pub(super) fn all() -> Vec<(&'static str, RefOr<Response>)> {
            vec![$(<$name as ToResponse>::response()),*]
        }
    };
}

shared! {
    BadRequest (None) => "The request is invalid: a body that is not JSON or not of the request schema (`code` `invalid_json`), a value out of range (`invalid_value`, with `param` naming the field), a Content-Type other than JSON (`unsupported_content_type`), or a prompt longer than the model's context (`context_length_exceeded`).";
    Unauthorized (Some(("WWW-Authenticate", "WwwAuthenticate"))) => "The API key is missing, malformed, unknown, revoked or expired (`code` `invalid_api_key`).";
    NotFound (None) => "The model does not exist, or the key may not use it (`code` `model_not_found`, `param` `model`).";
    Forbidden (None) => "The key's kind does not allow this route (`code` `insufficient_permissions`; the message names the missing scope, e.g. `Missing scopes: model.request.`).";
    PayloadTooLarge (None) => "The request body is larger than the server's limit (`code` `request_too_large`).";
    TooManyRequests (Some(("Retry-After", "RetryAfter"))) => "The model is overloaded (`type` `rate_limit_exceeded`, `code` `engine_overloaded`).";
    InternalServerError (None) => "An internal error (`type` `server_error`); the message quotes the request id.";
    BadGateway (None) => "The upstream engine failed before answering, and so did every fallback of the model (`type` `server_error`, `code` `bad_gateway`).";
    GatewayTimeout (None) => "The upstream engine did not answer in time (`type` `server_error`, `code` `gateway_timeout`); or `Cache-Control: only-if-cached` was sent and the response cache holds no reply to this request (`type` `invalid_request_error`, `code` `not_cached`).";
    ServiceUnavailable (Some(("Retry-After", "RetryAfter"))) => "The model or the store is unavailable (`type` `server_error`, `code` `model_unavailable` or `service_unavailable`).";
}

/// The errors of every route that runs a model in OpenAI's dialect (chat,
/// legacy completions, embeddings, rerank, audio), as `responses(...)`
/// takes them after the route's own 200: the shared responses above, each
/// by reference, 400 to 504.
pub(crate) struct InferenceErrors;

impl utoipa::IntoResponses for InferenceErrors {
    fn responses() -> std::collections::BTreeMap<String, RefOr<Response>> {
        [
            ("400", "BadRequest"),
            ("401", "Unauthorized"),
            ("403", "Forbidden"),
            ("404", "NotFound"),
            ("413", "PayloadTooLarge"),
            ("429", "TooManyRequests"),
            ("500", "InternalServerError"),
            ("502", "BadGateway"),
            ("503", "ServiceUnavailable"),
            ("504", "GatewayTimeout"),
        ]
        .into_iter()
        .map(|(status, name)| (status.to_owned(), RefOr::Ref(Ref::from_response_name(name))))
        .collect()
    }
}
