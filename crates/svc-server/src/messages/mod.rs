//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's
//! Messages API over the same keys, limits, engines, usage and metrics as
//! chat completions. The key comes as `x-api-key` or a bearer token;
//! `anthropic-version`, `anthropic-beta` and `?beta=true` are accepted
//! (svc serves one version of the API). Every error, a wrong method or
//! path under `/v1/messages` included, is in Anthropic's shape
//! ([`error::MessagesError`]). The wire request becomes a domain one in
//! [`valid`]; [`stop`] finds its stop sequences in the reply.

pub(crate) mod error;
pub(crate) mod mcp;
pub(crate) mod shape;
pub(crate) mod stop;
pub(crate) mod tool_loop;
pub(crate) mod valid;

use std::marker::PhantomData;

use axum::body::Body;
use axum::extract::{FromRef, FromRequestParts, Request, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::Response;
use svc_api::messages::{
    AnthropicErrorBody, CountTokensRequest, CountTokensResponse, MessagesRequest,
};
use svc_core::{KeyRecord, KeyService};
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::routes;

use crate::cache::{Cacheable, Lookup, reproducible};
use crate::endpoint::{Dialect, Endpoint};
use crate::error::ApiError;
use crate::extract::{Scope, authenticate, in_scope, scope};
use crate::pipeline::{Metering, Opened, json_response, limited, open, sse_response};
use crate::state::AppState;
use error::MessagesError;
use shape::MessageMeta;
use valid::{ValidCountTokensRequest, ValidMessagesRequest};

/// What this endpoint is: its OpenAPI group, its paths and dialect, and
/// what batches and the response cache make of it.
pub(crate) const ENDPOINT: Endpoint = Endpoint::new(
    "messages",
    "Anthropic's Messages API, on the same keys, models and limits. Its errors are `{\"type\":\"error\",\"error\":{\"type\",\"message\"},\"request_id\"}`.",
)
.paths(&["/v1/messages"])
    .dialect(Dialect::Anthropic)
    .generates("createMessage");

/// Messages' replies are kept when greedy (Anthropic's dialect has no
/// seed), unless they may call MCP tools, which act on the world.
impl Cacheable for svc_api::messages::MessagesRequest {
    const ROUTE: &'static str = ENDPOINT.tag;
    fn reproducible(&self) -> bool {
        self.mcp_servers.as_ref().is_none_or(Vec::is_empty) && reproducible(self.temperature, None)
    }
}

/// The Messages routes: each answers a wrong method in Anthropic's shape,
/// and so does every other path under `/v1/messages`.
pub fn routes() -> OpenApiRouter<AppState> {
    fn anthropic(
        (schemas, paths, router): UtoipaMethodRouter<AppState>,
    ) -> UtoipaMethodRouter<AppState> {
        (schemas, paths, router.fallback(method_not_allowed))
    }
    OpenApiRouter::new()
        .routes(anthropic(routes!(create)))
        .routes(anthropic(routes!(count_tokens)))
        .route("/v1/messages/{*rest}", axum::routing::any(unknown_url))
}

async fn unknown_url(request: Request) -> MessagesError {
    MessagesError(ApiError::unknown_url(request).await)
}

async fn method_not_allowed(request: Request) -> MessagesError {
    MessagesError(ApiError::method_not_allowed(request).await)
}

#[utoipa::path(post, path = "/v1/messages", tag = "messages", operation_id = "createMessage",
    summary = "Create a message: the model's next reply, in Anthropic's Messages API.",
    description = "Anthropic's `POST /v1/messages`. The key comes as `x-api-key` or a bearer token; `anthropic-version`, `anthropic-beta` and `?beta=true` are accepted. Unknown fields are ignored. Tools whose `type` is neither absent nor `custom` (server tools such as web search) are accepted and left out of the prompt, except `mcp_toolset`: with `mcp_servers` (Anthropic's MCP connector, beta `mcp-client-2025-11-20` or the older form with `tool_configuration`) svc lists the servers' tools, runs the model's calls itself and asks the model again with the results; the reply holds `mcp_tool_use` and `mcp_tool_result` blocks before the answer (streamed as `content_block_start`/`input_json_delta`/`content_block_stop`). A registered server is named by its `name` or its `url`; another `url` is an ad-hoc server, refused (400 naming `mcp_servers[i].url`) unless the operator allows it. `thinking` blocks come from reasoning models (`svc-thinking`) unless `thinking.type` is `disabled` (reasoning off); `enabled` asks for the effort its `budget_tokens` says (up to 1024 low, up to 8192 medium, more high). An assistant turn's `thinking` blocks are its reasoning, for templates that render earlier reasoning. With `stream` true the reply is Server-Sent Events (`MessageStreamSseEvent`); an error after the stream has begun is a last `event: error`. The `message_start` event's usage is 0: the counts come in `message_delta`.",
    security(("bearer" = ["model.request"]), ("apiKey" = ["model.request"])),
    request_body = MessagesRequest,
    responses(
        (status = 200, description = "The message: whole, or streamed when `stream` is true.",
            content((svc_api::messages::MessageReply = "application/json"),
                (svc_api::messages::MessageStreamSseEvent = "text/event-stream"))),
        (status = 400, description = "`invalid_request_error`: a body that is not JSON or not of the request schema, a value out of range (the message names the field as a path), an image or document block, or a prompt longer than the model's context.", body = AnthropicErrorBody),
        (status = 401, description = "`authentication_error`: the key (`x-api-key` or bearer) is missing, malformed, unknown, revoked or expired.", body = AnthropicErrorBody),
        (status = 403, description = "`permission_error`: the key's kind does not allow this route (the message names the missing scope, e.g. `model.request`).", body = AnthropicErrorBody),
        (status = 404, description = "`not_found_error`: the model does not exist, or the key may not use it.", body = AnthropicErrorBody),
        (status = 413, description = "`invalid_request_error`: the body is larger than the server's limit.", body = AnthropicErrorBody),
        (status = 429, description = "`rate_limit_error`: the key's rate limit is reached.", body = AnthropicErrorBody),
        (status = 500, description = "`api_error`: an internal error; the message quotes the request id.", body = AnthropicErrorBody),
        (status = 503, description = "`overloaded_error` (the model is unavailable) or `api_error` (the store is).", body = AnthropicErrorBody),
        (status = 502, description = "`api_error`: the upstream engine failed before answering (and so did every fallback).", body = AnthropicErrorBody),
        (status = 504, description = "`timeout_error`: the upstream engine did not answer in time; or `invalid_request_error`: `Cache-Control: only-if-cached` and the response cache holds no reply to this request.", body = AnthropicErrorBody),
        (status = 529, description = "`overloaded_error`: the model's queue is full.", body = AnthropicErrorBody),
    ))]
pub async fn create(
    AnthropicKey(key, _): AnthropicKey<scope::ModelRequest>,
    State(state): State<AppState>,
    request: Request,
) -> Response {
    limited::<MessagesError, _, _>(&state.admission, key, |key, metering| {
        answer(&state, key, request, metering)
    })
    .await
}

async fn answer(
    state: &AppState,
    key: KeyRecord,
    request: Request,
    metering: Metering,
) -> Result<Response, MessagesError> {
    let Opened {
        arrived,
        directives,
        body,
    } = open::<MessagesRequest, _>(request, state).await?;
    let plan = match state
        .cache
        .lookup(&state.admission, directives, &key, &body)
        .await?
    {
        Lookup::Hit(response) => return Ok(response),
        Lookup::Miss(plan) => plan,
    };
    let ValidMessagesRequest {
        model,
        stop_sequences: stops,
        mut generate,
        mcp,
        ..
    } = ValidMessagesRequest::try_from(body)?;
    let stream = generate.stream;
    // `thinking: disabled` is effort `none`: no reasoning, no thinking blocks.
    let reasoning = state
        .models
        .get(&model)
        .is_some_and(|r| crate::admission::reasons(r.reasoning, generate.reasoning_effort));
    let mut meta = MessageMeta::new(model.clone(), reasoning);
    // MCP servers: resolved and their tools offered before anything is
    // generated, so that a refusal is the request's status.
    let prepared = if mcp.is_empty() {
        None
    } else {
        Some(tool_loop::prepare(state, &key, mcp, &mut generate).await?)
    };
    let stops = tool_loop::Stops {
        sequences: stops,
        stopped_by: meta.stopped_by.clone(),
    };
    let outcome = metering.outcome.clone();
    let generated = tool_loop::generate(
        state,
        &key,
        &model,
        generate.clone(),
        arrived,
        metering.clone(),
        stops.clone(),
    )
    .await?;
    meta.model.clone_from(&generated.model);
    let response = match prepared {
        None if stream => sse_response(Body::from_stream(shape::sse(meta, generated.events))),
        None => json_response(&shape::collect(meta, generated.events).await?),
        Some(prepared) => {
            let run = tool_loop::Run {
                state: state.clone(),
                key,
                model,
                metering,
                toolset: prepared.toolset,
                request: generate,
                stops,
            };
            let steps = tool_loop::drive(run, meta, prepared.servers, generated.events);
            if stream {
                sse_response(Body::from_stream(tool_loop::sse(steps)))
            } else {
                json_response(&tool_loop::collect(steps).await?)
            }
        }
    };
    Ok(state.cache.keep(plan, response, &generated.model, outcome))
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens as the model's
/// engine counts them (exactly for the embedded engine; upstream engines
/// estimate, see [`svc_core::Engine::count_tokens`]). Counts against the
/// key's request limit and is refused once a budget of the key is spent,
/// as generation is; no usage is recorded, as nothing is generated.
/// Counting costs CPU (a whole prompt rendered and tokenized, off the
/// async workers), so a key has one count in flight at a time and the
/// server works on at most half its cores' worth at once (see
/// [`AppState::counting`]).
#[utoipa::path(post, path = "/v1/messages/count_tokens", tag = "messages", operation_id = "countMessageTokens",
    summary = "Count the tokens a Messages request's prompt uses.",
    description = "The system prompt, messages and tools as the model's engine counts them: exact for the embedded engine (the chat template rendered and tokenized as a generation would be), an estimate for upstream models (a token per 4 bytes of text and tool schemas, and 4 a message).",
    security(("bearer" = ["model.request"]), ("apiKey" = ["model.request"])),
    request_body = CountTokensRequest,
    responses(
        (status = 200, description = "The count.", body = CountTokensResponse),
        (status = 400, description = "`invalid_request_error`: a body that is not JSON or not of the request schema, a value out of range (the message names the field as a path), an image or document block, or a prompt longer than the model's context.", body = AnthropicErrorBody),
        (status = 401, description = "`authentication_error`: the key (`x-api-key` or bearer) is missing, malformed, unknown, revoked or expired.", body = AnthropicErrorBody),
        (status = 403, description = "`permission_error`: the key's kind does not allow this route (the message names the missing scope, e.g. `model.request`).", body = AnthropicErrorBody),
        (status = 404, description = "`not_found_error`: the model does not exist, or the key may not use it.", body = AnthropicErrorBody),
        (status = 413, description = "`invalid_request_error`: the body is larger than the server's limit.", body = AnthropicErrorBody),
        (status = 429, description = "`rate_limit_error`: the key's rate limit is reached.", body = AnthropicErrorBody),
        (status = 500, description = "`api_error`: an internal error; the message quotes the request id.", body = AnthropicErrorBody),
        (status = 503, description = "`overloaded_error` (the model is unavailable) or `api_error` (the store is).", body = AnthropicErrorBody),
        (status = 529, description = "`overloaded_error`: the model's queue is full.", body = AnthropicErrorBody),
    ))]
pub async fn count_tokens(
    AnthropicKey(key, _): AnthropicKey<scope::ModelRequest>,
    State(state): State<AppState>,
    request: Request,
) -> Response {
    limited::<MessagesError, _, _>(&state.admission, key, |key, _| count(&state, key, request))
        .await
}

async fn count(
    state: &AppState,
    key: KeyRecord,
    request: Request,
) -> Result<Response, MessagesError> {
    let body = open::<CountTokensRequest, _>(request, state).await?.body;
    let request = ValidCountTokensRequest::try_from(body)?;
    let mut generate = request.generate;
    let route = state
        .admission
        .routed(&key, &request.model, &mut generate)
        .map_err(ApiError::from)?;
    let generator = route
        .engine
        .generating(&request.model)
        .map_err(ApiError::from)?;
    state
        .admission
        .budgets
        .refuse_spent(&key, &request.model)
        .await
        .map_err(ApiError::from)?;
    let _place = state.counting.enter(&key.id).await?;
    let input_tokens = generator.count_tokens(&generate).await?;
    Ok(json_response(&CountTokensResponse { input_tokens }))
}

/// The key of a request to Anthropic's Messages API, holding what `S`
/// needs: sent as `x-api-key` (as Anthropic's clients do) or, like every
/// other route, as a bearer token. `x-api-key` wins when both are present.
#[derive(Debug, Clone)]
pub struct AnthropicKey<S>(pub KeyRecord, pub PhantomData<S>);

/// The header Anthropic's clients send their key in.
pub const X_API_KEY: &str = "x-api-key";

impl<S, St> FromRequestParts<St> for AnthropicKey<S>
where
    S: Scope,
    KeyService: FromRef<St>,
    St: Send + Sync,
{
    type Rejection = MessagesError;

    async fn from_request_parts(parts: &mut Parts, state: &St) -> Result<Self, MessagesError> {
        let header = match parts.headers.get(X_API_KEY) {
            Some(key) => Some(format!("Bearer {}", key.to_str().unwrap_or("\u{0}").trim())),
            None => parts
                .headers
                .get(header::AUTHORIZATION)
                .map(|v| v.to_str().unwrap_or("\u{0}").to_owned()),
        };
        let record = authenticate(&KeyService::from_ref(state), header.as_deref()).await?;
        Ok(AnthropicKey(in_scope::<S>(record)?, PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::http::Request;
    use svc_core::{Actor, KeyOrigin, KeyService, NewKey};

    use super::*;
    use crate::extract::Key;

    #[tokio::test]
    async fn a_batch_line_runs_as_the_batchs_key_in_either_dialect() {
        let store = svc_store::SqlStore::connect("sqlite::memory:")
            .await
            .unwrap();
        let keys = KeyService::new(Arc::new(store));
        let new = NewKey {
            name: "batch".into(),
            owner_id: None,
            created_via: KeyOrigin::Cli,
            expires_in: None,
            scope: Default::default(),
        };
        let (_, record) = keys.create(new, &Actor::Operator).await.unwrap();
        // A line carries no credentials of its own: the batch's key is a
        // task-local no client can set.
        let parts = || Request::new(()).into_parts().0;
        let line = crate::scoped::as_batch_line(record.id.clone(), async {
            let openai = Key::<scope::ModelRequest>::from_request_parts(&mut parts(), &keys).await;
            let anthropic =
                AnthropicKey::<scope::ModelRequest>::from_request_parts(&mut parts(), &keys).await;
            (openai.map(|k| k.0.id), anthropic.map(|k| k.0.id))
        });
        let (openai, anthropic) = line.await;
        assert_eq!(openai.unwrap(), record.id);
        assert_eq!(anthropic.unwrap(), record.id);
        // Outside a batch the same request has no key.
        assert!(
            AnthropicKey::<scope::ModelRequest>::from_request_parts(&mut parts(), &keys)
                .await
                .is_err()
        );
    }
}
