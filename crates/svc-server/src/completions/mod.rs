//! `POST /v1/completions`, OpenAI's legacy text completions: validate, run
//! each prompt through the shared pipeline ([`crate::pipeline`]) as a text
//! prompt (no chat template; fill-in-the-middle with a `suffix`), shape the
//! merged events into one `text_completion` or a stream of them
//! ([`shape`]). Errors are OpenAI's shape, [`ApiError`]'s own. The wire
//! request becomes a domain one in [`valid`].

pub(crate) mod shape;
pub(crate) mod valid;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use svc_api::CompletionRequest;
use svc_core::{EngineError, KeyRecord};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::cache::{Cacheable, Lookup, reproducible};
use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::extract::{Key, scope};
use crate::openapi::shared;
use crate::pipeline::{Metering, Opened, json_response, limited, open, sse_response};
use crate::state::AppState;
use valid::ValidCompletionRequest;

/// What this endpoint is: its OpenAPI group, its paths and dialect, and
/// what batches and the response cache make of it.
pub(crate) const ENDPOINT: Endpoint = Endpoint::new(
    "completions",
    "Legacy text completions: a prompt continued as it is, or filled in between a prompt and a suffix.",
)
.paths(&["/v1/completions"])
    .batch("/v1/completions")
    .generates("createCompletion");

/// Completions' replies are kept when greedy or seeded.
impl Cacheable for svc_api::CompletionRequest {
    const ROUTE: &'static str = ENDPOINT.tag;
    fn reproducible(&self) -> bool {
        reproducible(self.temperature, self.seed)
    }
}

/// The route.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create))
}

#[utoipa::path(post, path = "/v1/completions", tag = "completions", operation_id = "createCompletion",
    summary = "Create a text completion: the model's continuation of a prompt, as it is (legacy).",
    description = "The prompt is continued as it is, without the chat template. With a `suffix` the model fills in the middle between `prompt` and `suffix`, with its own fill-in-the-middle tokens; a model without them answers 400 naming `suffix` (the default `svc` has none). `max_tokens` defaults to 16, as with OpenAI. With an array of prompts each gets `n` choices, choice `i` of prompt `p` having index `p * n + i`. With `stream` true the reply comes as Server-Sent Events: `data: <text_completion>` frames holding one choice each (with `echo`, first each choice's prompt), a frame with each choice's `finish_reason`, with `stream_options.include_usage` one with empty `choices` and the usage, and the literal `data: [DONE]`. An error after the stream has begun is sent as a last `data: {\"error\":{...}}` frame and the stream ends without `[DONE]`. `logprobs` (0 to 5) gives the generated tokens' log probabilities in the legacy shape (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`); with `echo` the prompt is scored too: the lists start with the prompt's tokens (the first with `null`), offsets from the prompt's start, and `max_tokens` may be 0 (embedded models; an upstream's answers 400 naming `logprobs`).",
    security(("bearer" = ["model.request"])),
    request_body = CompletionRequest,
    responses(
        (status = 200, description = "The completion: whole, or streamed when `stream` is true.",
            content((svc_api::Completion = "application/json"),
                (svc_api::completions::CompletionStreamEvent = "text/event-stream"))),
        shared::InferenceErrors,
    ))]
pub async fn create(
    Key(key, _): Key<scope::ModelRequest>,
    State(state): State<AppState>,
    request: Request,
) -> Response {
    limited(&state.admission, key, |key, metering| {
        answer(&state, key, request, metering)
    })
    .await
}

async fn answer(
    state: &AppState,
    key: KeyRecord,
    request: Request,
    metering: Metering,
) -> Result<Response, ApiError> {
    let Opened {
        arrived,
        directives,
        body,
    } = open::<CompletionRequest, _>(request, state).await?;
    let plan = match state
        .cache
        .lookup(&state.admission, directives, &key, &body)
        .await?
    {
        Lookup::Hit(response) => return Ok(response),
        Lookup::Miss(plan) => plan,
    };
    let request = ValidCompletionRequest::try_from(body)?;
    let (n, logprobs, stream) = (request.n(), request.logprobs(), request.stream());
    let prompts = request.prompts.len();
    // Only an echo needs the prompts' text after they go to the engine.
    let echoed: Vec<String> = if request.echo {
        request
            .prompts
            .iter()
            .filter_map(|p| p.prompt.as_ref().map(|t| t.text.clone()))
            .collect()
    } else {
        Vec::new()
    };
    // Each prompt is a generation of its own, charged and metered as one.
    // A failure to start one drops those started, which stops them.
    // The reply names the model that served its first prompt (each prompt
    // may fall back on its own).
    let mut streams = Vec::with_capacity(request.prompts.len());
    let mut served = None;
    let outcome = metering.outcome.clone();
    for prompt in request.prompts {
        let generated = state
            .admission
            .generate(&key, &request.model, prompt, arrived, metering.clone())
            .await
            .map_err(|refused| on_prompt(refused.into()))?;
        served.get_or_insert(generated.model);
        streams.push(generated.events);
    }
    let served = served.unwrap_or(request.model);
    let meta = shape::Meta::new(served.clone(), n, logprobs, prompts, echoed)
        .with_fingerprint(state.admission.fingerprint(&served));
    let merged = shape::merge(streams);
    let response = if stream {
        sse_response(Body::from_stream(shape::sse(
            meta,
            request.include_usage,
            merged,
        )))
    } else {
        json_response(&shape::collect(meta, merged).await?)
    };
    Ok(state.cache.keep(plan, response, &served, outcome))
}

/// A prompt too long for the model's context is the prompt's fault.
fn on_prompt(error: ApiError) -> ApiError {
    match error {
        ApiError::Engine(EngineError::ContextLengthExceeded { .. }) => ApiError::OnParam {
            param: "prompt",
            error: Box::new(error),
        },
        other => other,
    }
}
